#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "CliRunner.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/RequestRng.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/Sampler.hpp"
#include "kvscope/SamplingPolicy.hpp"

using namespace kvscope;
using nlohmann::json;

namespace {

const std::string kWarpersDir = KVSCOPE_FIXTURES_DIR "/hf/policy";

json loadWarpersJson() {
  std::ifstream in(kWarpersDir + "/warpers.json");
  EXPECT_TRUE(in.good()) << "missing fixture " << kWarpersDir << "/warpers.json";
  return json::parse(in);
}

SamplingPolicy policyFromCase(const json& c) {
  SamplingPolicy p;
  p.temperature = c.at("temperature").get<double>();
  if (!c.at("top_k").is_null()) p.topK = c.at("top_k").get<int64_t>();
  if (!c.at("top_p").is_null()) p.topP = c.at("top_p").get<double>();
  return p;
}

std::vector<float> tiesLogits() {
  auto f = SafetensorsFile::open(kWarpersDir + "/warpers.safetensors");
  return f->readFloat("ties.logits").data;
}

std::vector<float> randomLogits(std::mt19937& gen, size_t v, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(v);
  for (float& x : out) x = normal(gen);
  return out;
}

SamplingPolicy sampled(double t, uint64_t seed = 0) {
  SamplingPolicy p;
  p.temperature = t;
  p.seed = seed;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- SamplingPolicy

TEST(SamplingPolicy, RejectsInvalidValuesWithUsageError) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, SamplingPolicy>> bad;
  for (double t : {-1.0, -1e-12, nan, inf, -inf}) {
    SamplingPolicy p = sampled(t);
    bad.emplace_back("temperature " + std::to_string(t), p);
  }
  for (int64_t k : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    SamplingPolicy p = sampled(1.0);
    p.topK = k;
    bad.emplace_back("top-k " + std::to_string(k), p);
  }
  for (double tp : {0.0, -0.1, 1.0000001, 1.5, nan, inf}) {
    SamplingPolicy p = sampled(1.0);
    p.topP = tp;
    bad.emplace_back("top-p " + std::to_string(tp), p);
  }
  for (const auto& [what, p] : bad) {
    try {
      p.validate();
      ADD_FAILURE() << what << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_FALSE(std::string(e.what()).empty()) << what;
    }
  }
}

TEST(SamplingPolicy, MessagesNameTheParameter) {
  SamplingPolicy p = sampled(-2.0);
  try {
    p.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  p = sampled(1.0);
  p.topP = 0.0;
  try {
    p.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("top-p"), std::string::npos) << e.what();
  }
}

TEST(SamplingPolicy, AcceptsTheBoundaries) {
  SamplingPolicy p;  // greedy
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.greedy());
  p = sampled(1e-3);
  p.topK = 1;
  p.topP = 1.0;
  EXPECT_NO_THROW(p.validate());
  p.topP = std::nextafter(0.0, 1.0);
  EXPECT_NO_THROW(p.validate());
  p.topK = std::numeric_limits<int64_t>::max();
  EXPECT_NO_THROW(p.validate());
}

TEST(SamplingPolicy, DescribeAndJsonRoundTrip) {
  SamplingPolicy g;
  EXPECT_EQ(g.describe(), "greedy");
  SamplingPolicy p = sampled(0.7, 1);
  p.topK = 50;
  p.topP = 0.9;
  EXPECT_EQ(p.describe(), "T=0.7 top-k=50 top-p=0.9 seed=1");

  json j = p;
  EXPECT_EQ(j.at("temperature").get<double>(), 0.7);
  EXPECT_EQ(j.at("top_k").get<int64_t>(), 50);
  EXPECT_EQ(j.at("top_p").get<double>(), 0.9);
  EXPECT_EQ(j.at("seed").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("tie_rule").get<std::string>(), "lowest");
  EXPECT_EQ(j.get<SamplingPolicy>(), p);

  json jg = g;
  EXPECT_TRUE(jg.at("top_k").is_null());
  EXPECT_TRUE(jg.at("top_p").is_null());
  g.tieRule = SamplingPolicy::TieRule::Highest;
  g.seed = std::numeric_limits<uint64_t>::max();
  jg = g;
  EXPECT_EQ(jg.at("tie_rule").get<std::string>(), "highest");
  EXPECT_EQ(jg.get<SamplingPolicy>(), g);
  EXPECT_FALSE(jg.get<SamplingPolicy>() == p);
}

TEST(SamplingPolicy, FromJsonRejectsBadFields) {
  const char* bad[] = {
      R"({"top_k": 3})",                                   // no temperature
      R"({"temperature": "hot"})",                          // wrong type
      R"({"temperature": 1, "top_k": 2.5})",                // non-integer k
      R"({"temperature": 1, "top_p": "x"})",
      R"({"temperature": 1, "seed": -4})",
      R"({"temperature": 1, "tie_rule": "middle"})",
      R"({"temperature": -1})",                             // out of the domain
      R"({"temperature": 1, "top_p": 0})",
      R"([1, 2])",
  };
  for (const char* text : bad) {
    EXPECT_THROW(json::parse(text).get<SamplingPolicy>(), InputError) << text;
  }
  SamplingPolicy p = json::parse(R"({"temperature": 2, "top_k": null})").get<SamplingPolicy>();
  EXPECT_EQ(p.temperature, 2.0);
  EXPECT_FALSE(p.topK.has_value());
}

// ---------------------------------------------------------------- RequestRng

TEST(SamplerRng, DrawsAreCountedAndInUnitInterval) {
  RequestRng rng(42);
  EXPECT_EQ(rng.draws(), 0u);
  for (int i = 0; i < 1000; ++i) {
    double u = rng.nextUniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // a multiple of 2^-53
    ASSERT_EQ(std::ldexp(u, 53), std::floor(std::ldexp(u, 53)));
  }
  EXPECT_EQ(rng.draws(), 1000u);
  EXPECT_EQ(rng.seed(), 42u);
}

TEST(SamplerRng, UsesTopBitsOfMt19937_64) {
  RequestRng rng(7);
  std::mt19937_64 engine(7);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(rng.nextUniform(), static_cast<double>(engine() >> 11) / 9007199254740992.0);
}

TEST(SamplerRng, DiscardEqualsDrawsAndReseedResets) {
  RequestRng a(5), b(5);
  for (int i = 0; i < 17; ++i) a.nextUniform();
  b.discard(17);
  EXPECT_EQ(a.draws(), b.draws());
  EXPECT_EQ(a.nextUniform(), b.nextUniform());
  b.discard(0);
  EXPECT_EQ(a.nextUniform(), b.nextUniform());

  RequestRng fresh(9);
  const double first = fresh.nextUniform();
  a.reseed(9);
  EXPECT_EQ(a.draws(), 0u);
  EXPECT_EQ(a.seed(), 9u);
  EXPECT_EQ(a.nextUniform(), first);
  EXPECT_EQ(a.draws(), 1u);
}

// ---------------------------------------------------------------- Sampler

TEST(SamplerWarpers, ReproducesEveryTransformersCase) {
  const json spec = loadWarpersJson();
  auto file = SafetensorsFile::open(kWarpersDir + "/warpers.safetensors");
  ASSERT_FALSE(spec.at("cases").empty());
  double worst = -1.0;
  std::string worstKey;
  size_t checked = 0;
  for (const json& c : spec.at("cases")) {
    const std::string key = c.at("key").get<std::string>();
    const auto logits = file->readFloat(c.at("vector").get<std::string>() + ".logits").data;
    const auto expected = file->readFloat(key).data;
    const SamplingPolicy policy = policyFromCase(c);
    const auto got = Sampler::warpedProbabilities(logits, policy);
    ASSERT_EQ(got.size(), expected.size()) << key;
    double diff = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
      diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - expected[i]));
    if (diff > worst) {
      worst = diff;
      worstKey = key;
    }
    EXPECT_LE(diff, 1e-6) << key << " (" << policy.describe() << ")";
    const auto d = Sampler::warpedProbabilitiesDouble(logits, policy);
    const auto kept = std::count_if(d.begin(), d.end(), [](double v) { return v > 0.0; });
    EXPECT_EQ(kept, c.at("kept").get<int64_t>()) << key;
    // transformers keeps exactly the ids it gives a positive probability
    for (size_t i = 0; i < d.size(); ++i)
      EXPECT_EQ(d[i] > 0.0, expected[i] > 0.0f) << key << " id " << i;
    ++checked;
  }
  EXPECT_EQ(checked, spec.at("cases").size());
  std::cout << "[ warpers ] " << checked << " cases, worst max-abs diff " << worst << " ("
            << worstKey << ")\n";
  EXPECT_LE(worst, 1e-6) << "worst case " << worstKey;
}

TEST(SamplerWarpers, FixtureRecordsTransformersDomainAndTieRule) {
  // KV Scope's domain differs on purpose; this pins what the fixture says transformers does.
  const json spec = loadWarpersJson();
  const json& domain = spec.at("domain");
  EXPECT_EQ(domain.at("top_p=0").get<std::string>(), "accepted");
  EXPECT_EQ(domain.at("temperature=0").get<std::string>().rfind("rejected", 0), 0u);
  const auto ties = tiesLogits();
  const std::string rule = spec.at("argmax_tie_rule").get<std::string>();
  const std::string expectedIndex = std::to_string(Sampler::argmax(ties, SamplingPolicy::TieRule::Lowest));
  EXPECT_EQ(rule.substr(rule.rfind(' ') + 1), expectedIndex) << rule;
}

TEST(SamplerWarpers, TopKKeepsTiesWithTheKthValue) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 0.5f};
  SamplingPolicy p = sampled(1.0);
  p.topK = 2;  // the 2nd largest is 3 (tied): ids 1 and 3
  auto d = Sampler::warpedProbabilitiesDouble(logits, p);
  EXPECT_GT(d[1], 0.0);
  EXPECT_GT(d[3], 0.0);
  EXPECT_EQ(d[2], 0.0);
  p.topK = 3;  // the 3rd largest is 2, tied with id 4: four tokens survive
  d = Sampler::warpedProbabilitiesDouble(logits, p);
  EXPECT_EQ(std::count_if(d.begin(), d.end(), [](double v) { return v > 0.0; }), 4);
  p.topK = 1000;  // larger than V behaves as V
  d = Sampler::warpedProbabilitiesDouble(logits, p);
  EXPECT_EQ(std::count_if(d.begin(), d.end(), [](double v) { return v > 0.0; }), 6);
}

TEST(SamplerWarpers, TopPCutThroughATieRemovesLowerIds) {
  // Three equal logits, p = 0.5: cumulative 1/3 (id 0) is removed, 2/3 and 1 survive.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  SamplingPolicy p = sampled(1.0);
  p.topP = 0.5;
  auto d = Sampler::warpedProbabilitiesDouble(logits, p);
  EXPECT_EQ(d[0], 0.0);
  EXPECT_NEAR(d[1], 0.5, 1e-12);
  EXPECT_NEAR(d[2], 0.5, 1e-12);
  // A tiny p keeps exactly one token: the last of the tied maxima.
  p.topP = 1e-9;
  d = Sampler::warpedProbabilitiesDouble(logits, p);
  EXPECT_EQ(d, (std::vector<double>{0.0, 0.0, 1.0}));
}

TEST(SamplerWarpers, TopPOneKeepsEverything) {
  std::mt19937 gen(3);
  auto logits = randomLogits(gen, 64, 6.0f);
  logits[5] = -1e6f;  // vanishing but finite
  SamplingPolicy plain = sampled(1.0);
  SamplingPolicy p1 = plain;
  p1.topP = 1.0;
  auto a = Sampler::warpedProbabilitiesDouble(logits, plain);
  auto b = Sampler::warpedProbabilitiesDouble(logits, p1);
  EXPECT_EQ(a, b);
  SamplingPolicy p99 = plain;
  p99.topP = 0.99;
  auto c = Sampler::warpedProbabilitiesDouble(logits, p99);
  EXPECT_LT(std::count_if(c.begin(), c.end(), [](double v) { return v > 0.0; }), 64);
}

TEST(SamplerWarpers, TemperatureZeroIsGreedyNotAnError) {
  const auto ties = tiesLogits();
  SamplingPolicy greedy;
  EXPECT_TRUE(greedy.greedy());
  RequestRng rng(1);
  auto out = Sampler::choose(ties, greedy, rng);
  EXPECT_EQ(out.token, 1);
  EXPECT_EQ(out.eligible, (std::vector<int64_t>{1}));
  EXPECT_EQ(out.probabilities[1], 1.0f);
  EXPECT_EQ(out.uniform, -1.0);
  // warpedProbabilities is only defined for sampling
  EXPECT_THROW(Sampler::warpedProbabilities(ties, greedy), UsageError);
}

TEST(SamplerWarpers, TopPZeroIsRefusedWhereTransformersKeepsOneToken) {
  SamplingPolicy p = sampled(1.0);
  p.topP = 0.0;
  RequestRng rng;
  EXPECT_THROW(Sampler::choose(tiesLogits(), p, rng), UsageError);
  EXPECT_THROW(Sampler::warpedProbabilities(tiesLogits(), p), UsageError);
  EXPECT_EQ(rng.draws(), 0u);
}

TEST(SamplerWarpers, RefusesBadLogits) {
  SamplingPolicy p = sampled(1.0);
  RequestRng rng;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(Sampler::choose({}, p, rng), UsageError);
  EXPECT_THROW(Sampler::choose({1.0f, nan}, p, rng), UsageError);
  EXPECT_THROW(Sampler::choose({1.0f, inf}, p, rng), UsageError);
  EXPECT_THROW(Sampler::choose({-inf, -inf}, p, rng), UsageError);
  EXPECT_THROW(Sampler::argmax({}, SamplingPolicy::TieRule::Lowest), UsageError);
  EXPECT_THROW(Sampler::argmax({nan, 1.0f}, SamplingPolicy::TieRule::Lowest), UsageError);
  // masked (-inf) tokens are fine and never chosen
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Sampler::choose({-inf, 0.0f, -inf}, p, rng).token, 1);
}

TEST(SamplerTieRule, LowestIsTorchArgmaxHighestIsLast) {
  const auto ties = tiesLogits();  // maxima at ids 1, 2, 4
  EXPECT_EQ(Sampler::tiedAtTop(ties), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(Sampler::argmax(ties, SamplingPolicy::TieRule::Lowest), 1);
  EXPECT_EQ(Sampler::argmax(ties, SamplingPolicy::TieRule::Highest), 4);
  SamplingPolicy g;
  g.tieRule = SamplingPolicy::TieRule::Highest;
  RequestRng rng;
  auto out = Sampler::choose(ties, g, rng);
  EXPECT_EQ(out.token, 4);
  EXPECT_EQ(out.tiedAtTop, (std::vector<int64_t>{1, 2, 4}));
  // No tie: both rules agree.
  const std::vector<float> unique = {0.1f, 0.9f, 0.3f};
  EXPECT_EQ(Sampler::argmax(unique, SamplingPolicy::TieRule::Lowest), 1);
  EXPECT_EQ(Sampler::argmax(unique, SamplingPolicy::TieRule::Highest), 1);
}

TEST(SamplerChoose, GreedyConsumesNoDraws) {
  std::mt19937 gen(11);
  RequestRng rng(3);
  rng.nextUniform();
  SamplingPolicy g;
  for (int i = 0; i < 10; ++i) {
    auto out = Sampler::choose(randomLogits(gen, 32, 2.0f), g, rng);
    EXPECT_EQ(out.drawsBefore, 1u);
    EXPECT_EQ(out.drawsAfter, 1u);
  }
  EXPECT_EQ(rng.draws(), 1u);
}

TEST(SamplerChoose, SeededSequenceIsReproducibleAndCounted) {
  std::mt19937 gen(12);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 30; ++i) rows.push_back(randomLogits(gen, 40, 1.5f));
  SamplingPolicy p = sampled(1.3, 77);
  p.topK = 20;
  p.topP = 0.95;
  auto run = [&](uint64_t seed) {
    RequestRng rng(seed);
    std::vector<int64_t> tokens;
    for (size_t i = 0; i < rows.size(); ++i) {
      auto out = Sampler::choose(rows[i], p, rng);
      EXPECT_EQ(out.drawsBefore, i);
      EXPECT_EQ(out.drawsAfter, i + 1);
      EXPECT_GE(out.uniform, 0.0);
      EXPECT_LT(out.uniform, 1.0);
      EXPECT_TRUE(std::binary_search(out.eligible.begin(), out.eligible.end(), out.token));
      EXPECT_GT(out.probabilities[static_cast<size_t>(out.token)], 0.0f);
      EXPECT_FALSE(out.tiedAtTop.empty());
      // eligible is exactly the support, ascending
      std::vector<int64_t> support;
      for (size_t t = 0; t < out.probabilities.size(); ++t)
        if (out.probabilities[t] > 0.0f) support.push_back(static_cast<int64_t>(t));
      EXPECT_EQ(out.eligible, support);
      tokens.push_back(out.token);
    }
    EXPECT_EQ(rng.draws(), rows.size());
    return tokens;
  };
  const auto a = run(77), b = run(77), c = run(78);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SamplerChoose, UsesOneDrawAndInverseCdfInIdOrder) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  SamplingPolicy p = sampled(1.0, 5);
  RequestRng rng(5), shadow(5);
  for (int i = 0; i < 200; ++i) {
    auto out = Sampler::choose(logits, p, rng);
    const double u = shadow.nextUniform();
    EXPECT_EQ(out.uniform, u);
    auto d = Sampler::warpedProbabilitiesDouble(logits, p);
    double cum = 0.0;
    int64_t expect = -1;
    for (size_t t = 0; t < d.size(); ++t) {
      cum += d[t];
      if (u < cum) {
        expect = static_cast<int64_t>(t);
        break;
      }
    }
    EXPECT_EQ(out.token, expect) << "u=" << u;
  }
  EXPECT_EQ(Sampler::inverseCdf({0.0, 0.25, 0.0, 0.75}, 0.0), 1);
  EXPECT_EQ(Sampler::inverseCdf({0.0, 0.25, 0.0, 0.75}, 0.2499), 1);
  EXPECT_EQ(Sampler::inverseCdf({0.0, 0.25, 0.0, 0.75}, 0.25), 3);
  EXPECT_EQ(Sampler::inverseCdf({0.0, 0.25, 0.0, 0.75, 0.0}, 0.9999999999), 3);
  EXPECT_EQ(Sampler::inverseCdf({0.0, 0.0}, 0.5), -1);
}

TEST(SamplerChoose, SampledFrequenciesFollowTheProbabilities) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f};
  SamplingPolicy p = sampled(1.0, 123);
  const auto d = Sampler::warpedProbabilitiesDouble(logits, p);
  RequestRng rng(123);
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(Sampler::choose(logits, p, rng).token)]++;
  for (size_t t = 0; t < 4; ++t) {
    const double sd = std::sqrt(d[t] * (1 - d[t]) / n);
    EXPECT_NEAR(counts[t] / double(n), d[t], 5 * sd) << "id " << t;
  }
}

// ---------------------------------------------------------------- kvscope-cli policy

namespace {

using test::CliRun;
using test::runKvscopeCli;

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

TEST(SamplerCli, JsonProbabilitiesMatchTheTransformersFixture) {
  const json spec = loadWarpersJson();
  auto file = SafetensorsFile::open(kWarpersDir + "/warpers.safetensors");
  const std::vector<std::string> keys = {"random.T0.5.k5.p0.9", "ties.T1.0.k5.p0.9",
                                         "ties.T2.0.kNone.p0.5", "peaked.T2.0.k1000.pNone"};
  for (const std::string& key : keys) {
    const auto it = std::find_if(spec.at("cases").begin(), spec.at("cases").end(),
                                 [&](const json& c) { return c.at("key") == key; });
    ASSERT_NE(it, spec.at("cases").end()) << key;
    const json& c = *it;
    std::vector<std::string> args = {"policy", "--json", "--seed", "4", "--logits",
                                     kWarpersDir + "/warpers.safetensors:" + c.at("vector").get<std::string>() + ".logits",
                                     "--temperature", fmt(c.at("temperature").get<double>())};
    if (!c.at("top_k").is_null()) args.insert(args.end(), {"--top-k", std::to_string(c.at("top_k").get<int>())});
    if (!c.at("top_p").is_null()) args.insert(args.end(), {"--top-p", fmt(c.at("top_p").get<double>())});
    const CliRun r = runKvscopeCli(args);
    ASSERT_TRUE(r.exitedWith(0)) << key << ": " << r;
    const json out = json::parse(r.out);
    const auto expected = file->readFloat(key).data;
    const auto probs = out.at("probabilities").get<std::vector<double>>();
    ASSERT_EQ(probs.size(), expected.size()) << key;
    double diff = 0.0;
    int64_t kept = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
      diff = std::max(diff, std::fabs(probs[i] - expected[i]));
      kept += probs[i] > 0.0;
    }
    EXPECT_LE(diff, 1e-6) << key;
    EXPECT_EQ(kept, c.at("kept").get<int64_t>()) << key;
    const auto eligible = out.at("eligible").get<std::vector<int64_t>>();
    EXPECT_EQ(static_cast<int64_t>(eligible.size()), kept) << key;
    EXPECT_NEAR(out.at("sum").get<double>(), 1.0, 1e-9) << key;
    const int64_t token = out.at("token").get<int64_t>();
    EXPECT_TRUE(std::binary_search(eligible.begin(), eligible.end(), token)) << key;
    EXPECT_EQ(out.at("policy").get<SamplingPolicy>().seed, 4u);
    // the same choice as the library with the same seed
    SamplingPolicy p = policyFromCase(c);
    p.seed = 4;
    RequestRng rng(4);
    EXPECT_EQ(token, Sampler::choose(file->readFloat(c.at("vector").get<std::string>() + ".logits").data,
                                     p, rng)
                         .token)
        << key;
  }
}

TEST(SamplerCli, GreedyAndTextOutput) {
  const std::string ties = kWarpersDir + "/warpers.safetensors:ties.logits";
  CliRun r = runKvscopeCli({"policy", "--json", "--temperature", "0", "--logits", ties});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  json out = json::parse(r.out);
  EXPECT_EQ(out.at("token").get<int64_t>(), 1);
  EXPECT_EQ(out.at("eligible"), json::array({1}));
  r = runKvscopeCli({"policy", "--json", "--temperature", "0", "--tie-rule", "highest", "--logits", ties});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_EQ(json::parse(r.out).at("token").get<int64_t>(), 4);
  r = runKvscopeCli({"policy", "--temperature", "1", "--top-k", "1", "--logits", ties});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("eligible: 3 of 10"), std::string::npos) << r;
}

TEST(SamplerCli, TwoDimensionalTensorUsesItsLastRow) {
  const std::string path = KVSCOPE_FIXTURES_DIR "/hf/golden/gpt2.safetensors";
  auto file = SafetensorsFile::open(path);
  const FloatTensor t = file->readFloat("p0.prompt_logits");
  ASSERT_EQ(t.shape.size(), 2u);
  const size_t v = static_cast<size_t>(t.shape[1]);
  const std::vector<float> last(t.data.end() - static_cast<std::ptrdiff_t>(v), t.data.end());
  CliRun r = runKvscopeCli({"policy", "--json", "--top-p", "0.8", "--logits", path + ":p0.prompt_logits"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json out = json::parse(r.out);
  EXPECT_EQ(out.at("row").get<int64_t>(), t.shape[0] - 1);
  SamplingPolicy p;
  p.temperature = 1.0;
  p.topP = 0.8;
  const auto expected = Sampler::warpedProbabilitiesDouble(last, p);
  EXPECT_EQ(out.at("probabilities").get<std::vector<double>>(), expected);
  r = runKvscopeCli({"policy", "--logits", path + ":p0.prompt_logits"});
  EXPECT_NE((r.out + r.err).find("last row"), std::string::npos) << r;
}

TEST(SamplerCli, BadParametersExitTwoWithAMessage) {
  const std::string ties = kWarpersDir + "/warpers.safetensors:ties.logits";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--temperature=-1", "temperature"},
      {"--temperature=abc", "temperature"},
      {"--top-k=0", "top-k"},
      {"--top-p=0", "top-p"},
      {"--tie-rule=middle", "tie-rule"},
  };
  for (const auto& [option, word] : bad) {
    const CliRun r = runKvscopeCli({"policy", "--logits", ties, option});
    EXPECT_TRUE(r.exitedWith(2)) << option << ": " << r;
    EXPECT_NE(r.err.find(word), std::string::npos) << option << ": " << r;
  }
  // No key and several tensors: exit 2, listing the keys.
  CliRun r = runKvscopeCli({"policy", "--logits", kWarpersDir + "/warpers.safetensors"});
  EXPECT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("ties.logits"), std::string::npos) << r;
  r = runKvscopeCli({"policy", "--logits", kWarpersDir + "/warpers.safetensors:absent"});
  EXPECT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("absent"), std::string::npos) << r;
}
