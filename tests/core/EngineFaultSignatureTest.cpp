// Each engine fault leaves its own signature in the recorded trace (independent of the
// audit): the cache grows by two, one layer's records equal another's, a request's earlier
// rows change when another arrives, positions shift, the RNG ledger jumps, ...
#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"

using namespace kvscope;

namespace {
RequestSpec request(std::vector<int64_t> prompt, int64_t maxNew = 5, int64_t arrival = 0) {
  RequestSpec s;
  s.promptIds = std::move(prompt);
  s.maxNewTokens = maxNew;
  s.stopAtEos = false;
  s.arrivalTick = arrival;
  return s;
}
Trace run(const std::string& model, std::vector<RequestSpec> specs, std::vector<std::string> faults, bool snapshots = false) {
  EngineOptions o;
  o.recordSnapshots = snapshots;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(Model::load(test::hfModel(model))).run(specs, o);
}
const std::vector<int64_t> kFaultPrompt = {0, 34, 86, 69, 301, 291};
}  // namespace

TEST(EngineFaultSignature, DuplicateAppendGrowsTheCacheByTwo) {
  Trace t = run("llama", {request(kFaultPrompt)}, {"duplicate_append:layer=1,step=2"});
  auto steps = t.stepsOf(0);
  EXPECT_EQ(steps[2]->layers[1].cacheLength - steps[1]->layers[1].cacheLength, 2);
  EXPECT_EQ(steps[2]->layers[0].cacheLength - steps[1]->layers[0].cacheLength, 1);
  EXPECT_EQ(steps[2]->layers[1].keys.shape[1], 2);
}

TEST(EngineFaultSignature, DuplicatePromptTokenFeedsTheLastPromptTokenAgain) {
  Trace t = run("gpt2", {request(kFaultPrompt)}, {"duplicate_prompt_token"});
  auto steps = t.stepsOf(0);
  ASSERT_EQ(steps[1]->fedIds.size(), 2u);
  EXPECT_EQ(steps[1]->fedIds[0], kFaultPrompt.back());
  EXPECT_EQ(steps[1]->layers[0].cacheLength - steps[0]->layers[0].cacheLength, 2);
}

TEST(EngineFaultSignature, WrongLayerStoresTheSourceLayersRecords) {
  Trace t = run("llama", {request(kFaultPrompt)}, {"wrong_layer:layer=1,source=0"});
  for (const auto& s : t.steps) EXPECT_EQ(s.layers[1].keys, s.layers[0].keys) << s;
  Trace clean = run("llama", {request(kFaultPrompt)}, {});
  EXPECT_NE(clean.steps[0].layers[1].keys, clean.steps[0].layers[0].keys);
}

TEST(EngineFaultSignature, CrossRequestRewritesTheVictimsEarlierRows) {
  Trace t = run("llama", {request(kFaultPrompt, 5, 0), request({0, 316, 284}, 3, 2)},
                {"cross_request:request=1,victim=0"}, true);
  auto victim = t.stepsOf(0);
  auto intruder = t.stepsOf(1);
  EXPECT_EQ(intruder[0]->slot, victim[0]->slot);
  // Before the arrival (tick 1) the victim's entry 1 holds its own record; after the
  // intruder's prefill (tick 2) it holds the intruder's (entry 0 is BOS in both prompts).
  const auto& before = victim[1]->layers[0].snapshotKeys;
  const auto& after = victim[2]->layers[0].snapshotKeys;
  const auto& intruderRecords = intruder[0]->layers[0].keys;
  const int64_t d = before.shape[2];
  auto column0 = [&](const FloatTensor& t) { return std::vector<float>(t.data.begin() + d, t.data.begin() + 2 * d); };
  EXPECT_NE(column0(before), column0(after));
  EXPECT_EQ(column0(after), column0(intruderRecords));
  Trace clean = run("llama", {request(kFaultPrompt, 5, 0), request({0, 316, 284}, 3, 2)}, {});
  EXPECT_NE(clean.stepsOf(1)[0]->slot, clean.stepsOf(0)[0]->slot);
}

TEST(EngineFaultSignature, WrongPositionShiftsPositionIds) {
  Trace t = run("gpt2", {request(kFaultPrompt)}, {"wrong_position:offset=3,step=2"});
  auto steps = t.stepsOf(0);
  EXPECT_EQ(steps[1]->positions[0], 6);
  EXPECT_EQ(steps[2]->positions[0], 7 + 3);
  Trace restart = run("gpt2", {request(kFaultPrompt)}, {"wrong_position:restart=1,step=2"});
  EXPECT_EQ(restart.stepsOf(0)[2]->positions[0], 0);
  EXPECT_EQ(restart.stepsOf(0)[3]->positions[0], 1);
}

TEST(EngineFaultSignature, StaleCacheKeepsTheCacheAcrossAWeightUpdate) {
  Trace stale = run("llama", {request(kFaultPrompt, 6)}, {"stale_cache:tick=3,layer=0"});
  auto steps = stale.stepsOf(0);
  EXPECT_EQ(steps[2]->weightsVersion, 0u);
  EXPECT_EQ(steps[3]->weightsVersion, 1u);
  EXPECT_EQ(steps[3]->fedIds.size(), 1u);  // no rebuild
  ASSERT_EQ(stale.events.size(), 1u);
  EXPECT_EQ(stale.events[0].kind, "weight_update");
  // Without the fault the engine rejects the stale cache and rebuilds it.
  EngineOptions o;
  o.weightUpdates.push_back({3, "model.layers.0.self_attn.k_proj.weight", 0.5f, 0});
  Trace rebuilt = Engine(Model::load(test::hfModel("llama"))).run({request(kFaultPrompt, 6)}, o);
  const auto* s3 = rebuilt.stepsOf(0)[3];
  EXPECT_EQ(s3->events, (std::vector<std::string>{"cache_reset"}));
  EXPECT_EQ(s3->fedIds.size(), kFaultPrompt.size() + 3);
}

TEST(EngineFaultSignature, TieRuleLastAndRngFaultsChangeOnlyThePolicyLedger) {
  RequestSpec sampled = request(kFaultPrompt, 6);
  sampled.policy.temperature = 1.5;
  sampled.policy.seed = 7;
  Trace clean = run("llama", {sampled}, {});
  Trace extra = run("llama", {sampled}, {"rng_extra_draw:step=2"});
  EXPECT_EQ(clean.stepsOf(0)[2]->rngDrawsBefore, 2u);
  EXPECT_EQ(extra.stepsOf(0)[2]->rngDrawsBefore, 3u);
  Trace reseed = run("llama", {sampled}, {"rng_reseed:step=2"});
  EXPECT_EQ(reseed.stepsOf(0)[3]->rngDrawsBefore, 0u);
}

TEST(EngineFaultSignature, ContextErrorIsRaisedBeforeTheLookup) {
  // GPT-2 has 64 position rows: the engine stops before asking for row 64.
  Trace t = run("gpt2", {request(std::vector<int64_t>(62, 5), 10)}, {});
  EXPECT_EQ(t.requests[0].stopReason, "context_limit");
  int64_t maxPos = 0;
  for (const auto& s : t.steps)
    for (int64_t p : s.positions) maxPos = std::max(maxPos, p);
  EXPECT_EQ(maxPos, 63);
  // A position fault that would read row 64 stops the request instead of reading it.
  Trace shifted = run("gpt2", {request(std::vector<int64_t>(60, 5), 10)}, {"wrong_position:offset=3,step=1"});
  EXPECT_EQ(shifted.requests[0].stopReason, "context_limit");
  for (const auto& s : shifted.steps)
    for (int64_t p : s.positions) EXPECT_LT(p, 64);
}

TEST(EngineFaultSignature, BadFaultSpecsAreUsageErrors) {
  EXPECT_THROW(FaultSpec::parse("no_such_fault"), UsageError);
  EXPECT_THROW(FaultSpec::parse("wrong_layer:layer=x"), UsageError);
  EXPECT_THROW(FaultSpec::parse("wrong_layer:colour=2"), UsageError);
  EXPECT_THROW(run("llama", {request(kFaultPrompt)}, {"wrong_layer:layer=1,source=2"}), UsageError);
  EXPECT_THROW(run("llama", {request(kFaultPrompt)}, {"wrong_layer:layer=7,source=0"}), UsageError);
  EXPECT_EQ(FaultSpec::parse("wrong_layer:layer=2,source=1").toString(), "wrong_layer:layer=2,request=-1,source=1,step=0");
}
