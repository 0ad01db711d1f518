// Ring-buffer sliding-window caches and window_wrap (KV Scope's addition): a ring of W
// slots on every sliding layer audits clean (model+trace and trace+trace) and records where
// each slot's position is; the fault that writes one slot back once the ring has wrapped is
// window_wrap at the first wrapped step and the faulty layer, on Mistral (every layer
// slides) and Qwen2 (layer 0 attends fully); the trace fields round-trip and bad ones are
// refused naming the field. Prints one table of every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"

using namespace kvscope;
using nlohmann::json;

namespace {

constexpr int64_t kRingWindow = 6;

// Mistral: every layer slides; Qwen2: layers 1 and 2 slide, layer 0 attends fully.
std::string windowedModel(Architecture arch) {
  static std::map<Architecture, std::string> made;
  auto it = made.find(arch);
  if (it != made.end()) return it->second;
  CheckpointSpec s = test::smallSpec(arch);
  s.numLayers = 3;
  s.slidingWindow = kRingWindow;
  if (arch == Architecture::Qwen2) {
    s.useSlidingWindow = true;
    s.maxWindowLayers = 1;
  }
  const std::string dir = test::writeScratchCheckpoint("ring-window", architectureName(arch), s);
  return made.emplace(arch, dir).first->second;
}

struct RingRun {
  std::string name;
  Architecture arch;
  int64_t prompt = 3;  // tokens; the ring first wraps at step 1 + kRingWindow - prompt
  std::vector<std::string> faults;
  bool ring = true;
  double temperature = 0.0;
  int requests = 1;
};

Trace ringRun(const RingRun& c, bool uncached = false) {
  auto m = Model::load(windowedModel(c.arch));
  std::vector<RequestSpec> specs;
  for (int i = 0; i < c.requests; ++i) {
    RequestSpec s;
    for (int64_t t = 0; t < c.prompt + i; ++t) s.promptIds.push_back((37 * t + 11 * i + 5) % 300);
    s.maxNewTokens = 8;
    s.stopAtEos = false;
    s.arrivalTick = i;
    s.policy.temperature = c.temperature;
    s.policy.seed = 5 + static_cast<uint64_t>(i);
    specs.push_back(s);
  }
  EngineOptions o;
  o.uncached = uncached;
  o.ringWindow = c.ring && !uncached;
  if (!uncached)
    for (const auto& f : c.faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run(specs, o);
}

test::AccuracyTable* const ringTable =
    test::AccuracyTable::registered("ring window / window_wrap accuracy");

// Audits `c` in model+trace and trace+trace (against the uncached engine) mode; expects
// clean, or window_wrap alone at (step, layer).
void expectRingAudit(const RingRun& c, int64_t step = -1, int64_t layer = -1) {
  const Trace cached = test::writtenAndRead(ringRun(c), "ring-window-traces", c.name + ".kvtrace");
  const AuditReport model = Auditor::audit(*Model::load(windowedModel(c.arch)), cached).report;
  const AuditReport pair = Auditor::auditTraces(ringRun(c, /*uncached=*/true), cached).report;
  for (const auto* rep : {&model, &pair}) {
    const std::string mode = rep == &model ? "model+trace" : "trace+trace";
    std::string got;
    for (const auto& f : rep->findings) got += (got.empty() ? "" : ",") + f.id;
    bool pass;
    if (step < 0) {
      EXPECT_TRUE(rep->clean() && rep->findings.empty()) << c.name << " " << mode << "\n"
                                                         << rep->toText();
      pass = rep->clean() && rep->findings.empty();
    } else {
      const Finding& f = test::onlyFinding(*rep, finding::WindowWrap);
      EXPECT_EQ(f.step, step) << c.name << " " << mode << "\n" << rep->toText();
      EXPECT_EQ(f.layer, layer) << c.name << " " << mode << "\n" << rep->toText();
      EXPECT_EQ(rep->firstDivergence.step, step) << c.name << " " << mode;
      EXPECT_EQ(f.evidence.at("onset_is_first_wrap"), 1.0) << c.name << " " << mode;
      pass = rep->findings.size() == 1 && f.id == finding::WindowWrap && f.step == step &&
             f.layer == layer;
    }
    ringTable->add({c.name, mode, step < 0 ? "clean" : "window_wrap", got.empty() ? "clean" : got,
                    rep->firstDivergence.step, rep->firstDivergence.layer, "", pass});
  }
}

std::string ringReadErrorField(const std::string& path) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    return e.field();
  }
  return "(read without error)";
}

}  // namespace

TEST(RingWindow, MatrixRowIsKvScopesAdditionAfterPrefixReuse) {
  test::expectAdditionAfter(finding::WindowWrap, finding::PrefixReuse);
}

TEST(RingWindow, RingHoldsTheLastWindowAndChoosesAsTheFullCache) {
  for (Architecture arch : {Architecture::Mistral, Architecture::Qwen2}) {
    const RingRun c{"ring", arch, 3, {}};
    const Trace ring = test::writtenAndRead(ringRun(c), "ring-window-traces", "roundtrip.kvtrace");
    RingRun full = c;
    full.ring = false;
    const Trace plain = ringRun(full);
    EXPECT_EQ(ring.requests[0].generated, plain.requests[0].generated) << architectureName(arch);
    ASSERT_EQ(ring.layerKinds.size(), 3u);
    EXPECT_EQ(ring.layerKinds[0].window, arch == Architecture::Qwen2 ? 0 : kRingWindow);
    EXPECT_EQ(ring.layerKinds[2], (TraceLayerKind{kRingWindow, kRingWindow}));
    EXPECT_EQ(plain.layerKinds[2], (TraceLayerKind{kRingWindow, 0}));  // the window, no ring
    for (const TraceStep& s : ring.steps) {
      const int64_t fed = s.positions.back() + 1;  // one request: positions 0..n-1
      const auto& rec = s.layers[2];
      EXPECT_EQ(rec.cacheLength, std::min(fed, kRingWindow)) << "step " << s.step;
      ASSERT_EQ(rec.ringPositions.size(), static_cast<size_t>(kRingWindow));
      for (int64_t p = std::max<int64_t>(0, fed - kRingWindow); p < fed; ++p)  // slot p mod W
        EXPECT_EQ(rec.ringPositions[static_cast<size_t>(p % kRingWindow)], p) << "step " << s.step;
      // The records are the step's own new entries, as for a growing cache.
      EXPECT_EQ(rec.keys.shape[1], static_cast<int64_t>(s.fedIds.size()));
      EXPECT_EQ(s.layers[0].ringPositions.empty(), arch == Architecture::Qwen2);
    }
  }
}

TEST(RingWindow, CorrectRingsAuditClean) {
  for (Architecture arch : {Architecture::Mistral, Architecture::Qwen2}) {
    const std::string a = architectureName(arch);
    expectRingAudit({a + " ring, wraps in decode", arch, 3, {}});
    expectRingAudit({a + " ring, prompt past window", arch, 9, {}});
    expectRingAudit({a + " ring, sampled", arch, 4, {}, true, 1.3});
    expectRingAudit({a + " ring, two requests", arch, 4, {}, true, 0.0, 2});
  }
}

TEST(RingWindow, WrongSlotAfterTheWrapIsWindowWrapAtTheFirstWrappedStep) {
  // prompt 3: the ring first holds more than 6 entries after step 4; prompt 5: after step 2.
  for (const auto& [arch, layers] : std::vector<std::pair<Architecture, std::vector<int64_t>>>{
           {Architecture::Mistral, {0, 1}}, {Architecture::Qwen2, {1, 2}}})
    for (int64_t layer : layers)
      for (int64_t prompt : {3, 5}) {
        const std::string name =
            architectureName(arch) + " L" + std::to_string(layer) + " p" + std::to_string(prompt);
        expectRingAudit({name, arch, prompt, {"window_wrap:layer=" + std::to_string(layer)}},
                        kRingWindow + 1 - prompt, layer);
      }
}

TEST(RingWindow, WrongSlotAfterAPromptLongerThanTheWindowIsFoundAtTheFirstDecodeStep) {
  // The prefill wraps the ring (12 or 9 tokens, window 6) and attends over its own records;
  // the first decode step writes entry n one slot back, over position n - 1, which its query
  // and the next ones need. Before the fix the prefill's shift only rotated the ring: clean.
  for (const auto& [arch, layer] : std::vector<std::pair<Architecture, int64_t>>{
           {Architecture::Mistral, 0}, {Architecture::Mistral, 1}, {Architecture::Qwen2, 2}})
    for (int64_t prompt : {9, 12}) {
      const std::string name = architectureName(arch) + " L" + std::to_string(layer) + " long p" +
                               std::to_string(prompt);
      const RingRun c{name, arch, prompt, {"window_wrap:layer=" + std::to_string(layer)}};
      const Trace t = test::writtenAndRead(ringRun(c), "ring-window-traces", name + ".kvtrace");
      for (const AuditReport& rep :
           {Auditor::audit(*Model::load(windowedModel(arch)), t).report,
            Auditor::auditTraces(ringRun(c, /*uncached=*/true), t).report}) {
        const Finding& f = test::onlyFinding(rep, finding::WindowWrap);
        EXPECT_EQ(f.step, 1) << name << "\n" << rep.toText();
        EXPECT_EQ(f.layer, layer) << name;
        EXPECT_EQ(f.evidence.count("missing_position") ? f.evidence.at("missing_position") : -1.0,
                  static_cast<double>(prompt - 1))
            << name;
        EXPECT_EQ(f.evidence.at("first_wrapped_step"), 0.0) << name;  // the prefill wrapped it
      }
    }
}

TEST(RingWindow, EvidenceNamesTheLostPositionAndTheSlot) {
  const Trace t = ringRun({"evidence", Architecture::Mistral, 3, {"window_wrap:layer=1"}});
  const AuditReport rep =
      Auditor::audit(*Model::load(windowedModel(Architecture::Mistral)), t).report;
  const Finding& f = test::onlyFinding(rep, finding::WindowWrap);
  // Entry 6 went one slot back (slot 5), over position 5, which the next query needs.
  EXPECT_EQ(f.evidence.at("missing_position"), 5.0);
  EXPECT_EQ(f.evidence.at("slot"), 5.0);
  EXPECT_EQ(f.evidence.at("slot_holds"), 6.0);
  EXPECT_EQ(f.evidence.at("window"), 6.0);
  EXPECT_EQ(f.evidence.at("first_wrapped_step"), 4.0);
  EXPECT_GT(f.evidence.at("earlier_maps_ok"), 0.0);
  EXPECT_EQ(f.evidence.at("first_divergent_step"), 5.0);  // the next query reads the hole
  EXPECT_NE(f.explanation.find("position 5, which the next query needs, is in no slot"),
            std::string::npos)
      << f.explanation;
  const auto& pos = rep.stages[2].checks;
  EXPECT_TRUE(std::any_of(pos.begin(), pos.end(), [](const std::string& c) {
    return c.rfind("FAIL: a ring cache's slot map", 0) == 0;
  })) << rep.toText();
  // The position timeline marks the wrap and the finding.
  auto out = std::make_shared<AuditJobOutput>();
  out->result = Auditor::audit(*Model::load(windowedModel(Architecture::Mistral)), t);
  const Inspector inspector(out);
  std::vector<std::string> kinds;
  for (const auto& m : inspector.timeline(0).markers)
    kinds.push_back(m.kind + "@" + std::to_string(m.step));
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "window_wraps@4"), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "window_wrap@4"), kinds.end());
}

TEST(RingWindow, InspectorDoesNotReadARingsSlotOrderChecksumAsARewrittenRow) {
  // A correct ring past its wrap: its slot-order checksums differ from the stream-order row
  // the inspector rebuilds, which is no rewrite.
  const Trace t = ringRun({"inspected", Architecture::Mistral, 3, {}});
  auto out = std::make_shared<AuditJobOutput>();
  out->result = Auditor::audit(*Model::load(windowedModel(Architecture::Mistral)), t);
  ASSERT_TRUE(out->result.report.clean()) << out->result.report.toText();
  Inspector inspector(out);
  for (int64_t layer = 0; layer < 3; ++layer) {
    InspectionPoint p;
    p.step = t.steps.back().step;
    p.layer = layer;
    const StepView v = inspector.view(p);
    EXPECT_FALSE(v.rowRewritten) << "layer " << layer << ": " << v.note;
    EXPECT_TRUE(v.note.find("overwritten") == std::string::npos) << v.note;
  }
}

TEST(RingWindow, RingWithoutSlotMapsIsNotCheckedNotOk) {
  Trace t = ringRun({"no maps", Architecture::Mistral, 3, {"window_wrap:layer=1"}});
  for (auto& s : t.steps)
    for (auto& l : s.layers) l.ringPositions.clear();
  const AuditReport rep =
      Auditor::audit(*Model::load(windowedModel(Architecture::Mistral)), t).report;
  EXPECT_FALSE(rep.hasFinding(finding::WindowWrap)) << rep.toText();
  const auto& pos = rep.stages[2].checks;
  EXPECT_TRUE(std::any_of(pos.begin(), pos.end(), [](const std::string& c) {
    return c.rfind("not checked: ring slots", 0) == 0;
  })) << rep.toText();
}

TEST(RingWindow, EngineRefusesRingsWithoutAWindowOrWithSpeculation) {
  auto refusal = [](const std::string& dir, EngineOptions o) {
    RequestSpec s;
    s.promptIds = {5, 6, 7};
    s.maxNewTokens = 2;
    try {
      Engine(Model::load(dir)).run({s}, o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(ran)");
  };
  EngineOptions ring;
  ring.ringWindow = true;
  EXPECT_NE(refusal(test::hfModel("llama"), ring).find("has no sliding-window layer"),
            std::string::npos);
  EXPECT_NE(refusal(test::hfModel("gpt2"), ring).find("has no sliding-window layer"),
            std::string::npos);
  EngineOptions full;
  full.faults = {FaultSpec::parse("window_wrap:layer=0")};
  EXPECT_NE(
      refusal(windowedModel(Architecture::Qwen2), full).find("layer 0 attends over every entry"),
      std::string::npos);
  EngineOptions spec = ring;
  spec.speculativeDrafts = 2;
  EXPECT_NE(refusal(windowedModel(Architecture::Mistral), spec).find("speculative"),
            std::string::npos);
}

TEST(RingWindow, ReaderRefusesBadLayerKindsAndSlotMaps) {
  const auto path = (test::scratchDir("ring-window-traces") / "valid.kvtrace").string();
  std::filesystem::remove(path);
  TraceFile::write(ringRun({"valid", Architecture::Mistral, 3, {}}), path);
  ASSERT_EQ(ringReadErrorField(path), "(read without error)");
  struct Bad {
    const char* name;
    std::function<void(json&)> edit;
    std::vector<std::string> drop;
    const char* field;
  };
  const std::vector<Bad> bad = {
      {"short", [](json& d) { d["layer_kinds"].erase(0); }, {}, "layer_kinds"},
      {"kind", [](json& d) { d["layer_kinds"][1]["kind"] = "local"; }, {}, "layer_kinds[1].kind"},
      {"window", [](json& d) { d["layer_kinds"][2]["window"] = 0; }, {}, "layer_kinds[2].window"},
      {"chunk", [](json& d) { d["layer_kinds"][2] = {{"kind", "chunked"}, {"ring_slots", 6}}; }, {},
       "layer_kinds[2].chunk"},
      {"ring-on-full",
       [](json& d) {
         d["layer_kinds"][0] = {{"kind", "full"}, {"ring_slots", 6}};
       },
       {},
       "layer_kinds[0].ring_slots"},
      {"slots-differ",
       [](json& d) { d["layer_kinds"][2]["ring_slots"] = 5; },
       {},
       "layer_kinds[2].ring_slots"},
      {"row", [](json& d) { d["steps"]["ring_row"][3] = 400; }, {}, "steps.ring_row[3]"},
      {"no-tensor", nullptr, {"ring_positions"}, "ring_positions"},
      {"no-rings", [](json& d) { d.erase("layer_kinds"); }, {}, "ring_positions"},
  };
  for (const auto& b : bad) {
    const auto out =
        (test::scratchDir("ring-window-traces") / (std::string(b.name) + ".kvtrace")).string();
    test::rewriteTrace(path, out, b.edit, b.drop);
    EXPECT_EQ(ringReadErrorField(out), b.field) << b.name;
  }
}

TEST(RingWindow, ContentsWrongUnderARightMapAreNamedAsContentsInStageThree) {
  // A correct ring past its wrap whose layer-1 checksum after the last step no longer fits
  // the records its (right) slot map places: stage 3 names the contents, not the map.
  Trace t = ringRun({"contents", Architecture::Mistral, 3, {}});
  TraceStep& last = t.steps.back();
  ASSERT_TRUE(last.layers[1].keyChecksum.has_value());
  last.layers[1].keyChecksum = *last.layers[1].keyChecksum ^ 1u;
  const AuditReport rep =
      Auditor::audit(*Model::load(windowedModel(Architecture::Mistral)), t).report;
  ASSERT_TRUE(rep.hasFinding(finding::WindowWrap)) << rep.toText();
  const auto& pos = rep.stages[2].checks;
  EXPECT_TRUE(std::any_of(pos.begin(), pos.end(), [](const std::string& c) {
    return c.rfind("FAIL: a ring cache's slots hold other values than the records its slot map "
                   "places there",
                   0) == 0;
  })) << rep.toText();
  EXPECT_FALSE(std::any_of(pos.begin(), pos.end(), [](const std::string& c) {
    return c.find("slot map loses a position") != std::string::npos;
  })) << rep.toText();
}
