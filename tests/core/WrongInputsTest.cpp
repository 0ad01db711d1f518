// A newcomer's wrong inputs are named, not diagnosed as cache bugs (issue 27, items 1-2):
// a checkpoint of the same shape with other weights fails stage 1 with the `reference`
// finding and nothing on top of it; a trace of another family, shape or vocabulary is
// refused before anything runs (exit 2, naming the field and both values).
#include <gtest/gtest.h>

#include "CliRunner.hpp"
#include "ScratchCheckpoint.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceModelFit.hpp"

using namespace kvscope;
using namespace kvscope::test;

namespace {

const char* kTag = "wrong-inputs";

std::string checkpoint(const std::string& name, CheckpointSpec spec) {
  static std::map<std::string, std::string> written;
  auto it = written.find(name);
  if (it == written.end()) it = written.emplace(name, writeScratchCheckpoint(kTag, name, spec)).first;
  return it->second;
}

std::string llama() { return checkpoint("llama", smallSpec()); }
std::string sibling() {  // the same shape, other weights
  CheckpointSpec s = smallSpec();
  s.seed = 5;
  return checkpoint("llama-seed5", s);
}

// A clean run of `dir` that names no checkpoint fingerprint (as another engine's trace).
Trace cleanRun(const std::string& dir, int requests = 1, const std::vector<std::string>& faults = {}) {
  auto m = Model::load(dir);
  std::vector<RequestSpec> specs;
  const std::vector<std::vector<int64_t>> prompts = {{1, 34, 86, 69, 201, 191, 38}, {2, 116, 84, 117, 9}};
  for (int i = 0; i < requests; ++i) {
    RequestSpec s;
    s.promptIds = prompts[static_cast<size_t>(i)];
    s.maxNewTokens = 5;
    s.stopAtEos = false;
    s.arrivalTick = i * 2;
    specs.push_back(s);
  }
  EngineOptions o;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  Trace t = Engine(m).run(specs, o);
  t.model.fingerprint.clear();
  return t;
}

void expectWrongWeights(const AuditReport& rep) {
  EXPECT_FALSE(rep.clean());
  EXPECT_EQ(rep.rootStage, 1) << rep.toText();
  ASSERT_EQ(rep.findings.size(), 1u) << rep.toText();
  EXPECT_EQ(rep.findings[0].id, "reference") << rep.toText();
  EXPECT_NE(rep.findings[0].explanation.find("these weights did not produce this trace"),
            std::string::npos)
      << rep.toText();
  EXPECT_EQ(rep.stages[0].status, StageStatus::Fail) << rep.toText();
  EXPECT_NE(rep.stages[0].summary.find("these weights did not produce this trace"),
            std::string::npos)
      << rep.stages[0].summary;
  EXPECT_EQ(rep.stages[1].status, StageStatus::NotRun) << rep.toText();
}

}  // namespace

TEST(WrongCheckpoint, SameShapeOtherWeightsFailsStageOne) {
  const Trace t = cleanRun(llama());
  const AuditReport own = Auditor::audit(*Model::load(llama()), t).report;
  EXPECT_TRUE(own.clean()) << own.toText();
  expectWrongWeights(Auditor::audit(*Model::load(sibling()), t).report);
}

TEST(WrongCheckpoint, EveryRequestOfATwoRequestRun) {
  expectWrongWeights(Auditor::audit(*Model::load(sibling()), cleanRun(llama(), 2)).report);
}

TEST(WrongCheckpoint, CacheBugsAtThePrefillStayCacheFindings) {
  // A position bug at the prefill rotates layer 0's keys (its values stay exact); a wrong
  // layer at step 0 leaves layer 0 alone: neither is the reference's fault.
  const auto model = Model::load(llama());
  for (const std::string fault : {"wrong_position:offset=3,step=0", "wrong_layer:layer=1,source=0,step=0"}) {
    const AuditReport rep = Auditor::audit(*model, cleanRun(llama(), 1, {fault})).report;
    EXPECT_FALSE(rep.clean()) << fault;
    EXPECT_FALSE(rep.hasFinding("reference")) << fault << "\n" << rep.toText();
  }
}

TEST(TraceModelFit, NamesTheFieldAndBothValues) {
  ModelConfig c = Model::load(llama())->config();
  TraceModelInfo t;
  t.architecture = "LlamaForCausalLM";
  t.numLayers = c.numLayers;
  t.numHeads = c.numHeads;
  t.numKvHeads = c.numKvHeads;
  t.headDim = c.headDim;
  t.vocabSize = c.vocabSize;
  EXPECT_TRUE(traceModelMismatches(t, c).empty());
  t.architecture = "my-engine";  // not a family KV Scope knows: not compared
  EXPECT_TRUE(traceModelMismatches(t, c).empty());
  t.architecture = "qwen2";
  t.numLayers = 4;
  const auto m = traceModelMismatches(t, c);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].field, "model.architecture");
  EXPECT_EQ(m[0].traceValue, "qwen2");
  EXPECT_EQ(m[0].modelValue, "llama");
  EXPECT_EQ(m[1].field, "model.num_layers");
  EXPECT_EQ(m[1].traceValue, "4");
  EXPECT_EQ(m[1].modelValue, "2");
  try {
    requireTraceFitsModel(t, "run.kvtrace", c);
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "run.kvtrace");
    EXPECT_EQ(e.field(), "model.architecture");
    EXPECT_NE(std::string(e.what()).find("model.num_layers 4 vs 2"), std::string::npos) << e.what();
  }
}

TEST(TraceModelFit, CliRefusesAnotherFamilyShapeOrVocabularyWithExit2) {
  const std::string trace = (scratchRoot(kTag) / "llama-run.kvtrace").string();
  TraceFile::write(cleanRun(llama()), trace, true);
  CheckpointSpec deeper = smallSpec();
  deeper.numLayers = 3;
  CheckpointSpec wider = smallSpec();
  wider.vocabSize = 320;
  struct Case {
    std::string model, field, traced, has;
  };
  const std::vector<Case> cases = {
      {checkpoint("qwen2", smallSpec(Architecture::Qwen2)), "model.architecture", "llama", "qwen2"},
      {checkpoint("llama-3-layers", deeper), "model.num_layers", "2", "3"},
      {checkpoint("llama-vocab-320", wider), "model.vocab_size", "300", "320"}};
  for (const Case& c : cases) {
    const CliRun r = runKvscopeCli({"audit", "--trace", trace, "--model", c.model});
    EXPECT_TRUE(r.exitedWith(2)) << r;
    const std::string want = "the trace's " + c.field + " is " + c.traced + " but checkpoint " +
                             c.model + "/config.json has " + c.has;
    EXPECT_NE(r.err.find(want), std::string::npos) << want << "\n" << r;
    EXPECT_NE(r.err.find(trace), std::string::npos) << r;
    EXPECT_EQ(r.out.find("verdict"), std::string::npos) << r;  // nothing ran
  }
  // The checkpoint that produced it audits clean.
  const CliRun own = runKvscopeCli({"audit", "--trace", trace, "--model", llama()});
  EXPECT_TRUE(own.exitedWith(0)) << own;
}
