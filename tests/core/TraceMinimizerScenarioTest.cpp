// minimizeAudit on every transformers-recorded scenario (tests/fixtures/hf/scenarios, the
// copies of ../shared/fixtures/hf/scenarios) and on built-in engine faults: the minimized
// trace, written and read back as the reproducer is, audits to the same finding id, first
// step and first layer, keeps fewer layers where the finding allows it, and is smaller.
// Prints one table of the sizes before and after.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "PythonTools.hpp"
#include "TestSupport.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceMinimizer.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

struct ScenarioRow {
  std::string name, finding, kept;
  uintmax_t before = 0, after = 0;
  size_t layersBefore = 0, layersAfter = 0;
};

std::vector<ScenarioRow>& rows() {
  static std::vector<ScenarioRow> r;
  return r;
}

// Prints the table once every test of the suite has run.
class SizeTable : public ::testing::Environment {
 public:
  void TearDown() override {
    if (rows().empty()) return;
    std::ostringstream os;
    os << "\nminimized traces (bytes before -> after)\n";
    os << std::left << std::setw(40) << "run" << std::setw(40) << "finding (request, step, layer)"
       << std::right << std::setw(10) << "before" << std::setw(10) << "after" << std::setw(8)
       << "ratio" << std::setw(9) << "layers"
       << "  kept\n";
    for (const ScenarioRow& r : rows()) {
      char ratio[16];
      std::snprintf(
          ratio, sizeof ratio, "%.3f",
          static_cast<double>(r.after) / static_cast<double>(std::max<uintmax_t>(r.before, 1)));
      os << std::left << std::setw(40) << r.name << std::setw(40) << r.finding << std::right
         << std::setw(10) << r.before << std::setw(10) << r.after << std::setw(8) << ratio
         << std::setw(9) << (std::to_string(r.layersAfter) + "/" + std::to_string(r.layersBefore))
         << "  " << r.kept << "\n";
    }
    std::printf("%s", os.str().c_str());
  }
};
[[maybe_unused]] const auto* const kTable = ::testing::AddGlobalTestEnvironment(new SizeTable);

fs::path scenarioDir() {
  static const fs::path d = [] {
    auto p = test::freshDir("minimizer-scenarios");
    fs::create_directories(p);
    return p;
  }();
  return d;
}

uintmax_t bytes(const std::string& p) { return fs::file_size(p); }

std::string where(const Finding& f) {
  return f.id + " (r" + std::to_string(f.request) + ", s" + std::to_string(f.step) + ", L" +
         std::to_string(f.layer) + ")";
}

// Minimizes the audit of `spec`, writes the reproducer, audits it as its command does and
// checks it shows the same first finding. Returns the row for the table.
ScenarioRow minimizeAndReaudit(const std::string& name, const AuditJobSpec& spec,
                               uintmax_t before) {
  ScenarioRow row;
  row.name = name;
  const AuditJobOutput out = runAuditJob(spec);
  const auto target = minimizeTarget(out.result.report);
  EXPECT_TRUE(target) << name << ": the audit is clean\n" << out.result.report.toText();
  if (!target) return row;
  const MinimizedTrace m = minimizeAudit(spec, out);
  const auto path = (scenarioDir() / (name + ".min.kvtrace")).string();
  // As kvscope-cli audit --minimize and the GUI's bundle write it.
  const Reproducer r = writeReproducer(spec, m, path, path, true, before);
  row.after = r.bytesAfter;
  row.before = r.bytesBefore;
  EXPECT_NE(r.command.find("--trace " + path), std::string::npos) << r.command;
  EXPECT_NE(r.markdown.find(r.command), std::string::npos);
  row.finding = where(target->finding);
  row.kept = m.cut.describe();
  row.layersBefore = out.result.trace.layerIndices().size();
  row.layersAfter = m.trace.layerIndices().size();
  // The reproducer: the written file audited with the same model, versions and options.
  AuditJobSpec again;
  again.modelDir = spec.modelDir;
  again.options.weightsDirectories = spec.options.weightsDirectories;
  again.options.toleranceScale = spec.options.toleranceScale;
  again.traceFile = path;
  if (m.reference) again.referenceTraceFile = referencePathFor(path);
  const AuditReport small = runAuditJob(again).result.report;
  const auto got = minimizeTarget(small);
  EXPECT_TRUE(got) << name << ": the minimized trace audits clean";
  if (!got) return row;
  EXPECT_EQ(got->finding.id, target->finding.id) << name;
  EXPECT_EQ(got->finding.request, target->finding.request) << name;
  EXPECT_EQ(got->finding.step, target->finding.step) << name;
  EXPECT_EQ(got->finding.layer, target->finding.layer) << name;
  EXPECT_EQ(small.firstDivergence.step, out.result.report.firstDivergence.step) << name;
  EXPECT_EQ(small.firstDivergence.layer, out.result.report.firstDivergence.layer) << name;
  EXPECT_TRUE(showsTarget(small, *target)) << name << "\n" << small.toText();
  EXPECT_LE(row.after, row.before) << name << ": " << row.kept;
  // An absent layer is never reported as checked.
  const Trace back = TraceFile::read(path);
  for (int64_t l = 0; l < back.model.numLayers; ++l) {
    if (back.hasLayer(l)) continue;
    bool named = false;
    for (const auto& st : small.stages)
      for (const auto& c : st.checks) named = named || c == layerNotInTraceNote(l);
    EXPECT_TRUE(named) << name << ": layer " << l << " is absent but no check says so";
  }
  rows().push_back(row);
  return row;
}

}  // namespace

TEST(TraceMinimizerScenarios, EveryDivergentScenarioKeepsItsFinding) {
  if (const std::string why = test::pythonUnavailable(); !why.empty()) GTEST_SKIP() << why;
  const fs::path scenarios = test::fixture("hf/scenarios");
  const auto repo = test::toolsDir().parent_path();
  int divergent = 0, layersCut = 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(scenarios))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& json : files) {
    const std::string name = json.stem().string();
    std::ifstream in(json);
    const auto doc = nlohmann::json::parse(in);
    const std::string modelName = doc.at("model").get<std::string>();
    AuditJobSpec spec;
    spec.modelDir = test::hfModel(modelName == "gpt2-updated" ? "gpt2" : modelName);
    if (modelName == "gpt2-updated") addWeightsVersion(spec, "1=" + test::hfModel("gpt2-updated"));
    spec.traceFile = (scenarioDir() / (name + ".kvtrace")).string();
    const auto convert =
        test::run(std::string(test::kPython) + " " +
                  test::quote((repo / "tests/scenarios/scenario_to_trace.py").string()) + " " +
                  test::quote(json.string()) + " " + test::quote(spec.modelDir) + " " +
                  test::quote(spec.traceFile));
    ASSERT_EQ(convert.status, 0) << name << ": " << convert.output;
    if (runAuditJob(spec).result.report.clean()) continue;  // nothing to minimize
    ++divergent;
    const ScenarioRow row = minimizeAndReaudit(name, spec, bytes(spec.traceFile));
    if (row.layersAfter < row.layersBefore) ++layersCut;
    // A finding on one layer (or two named by its evidence) keeps fewer than all three.
    if (name == "gpt2.wrong_layer" || name == "gpt2.duplicate_append") {
      EXPECT_LT(row.layersAfter, row.layersBefore) << name << ": " << row.kept;
    }
  }
  EXPECT_GE(divergent, 10) << "the divergent scenarios";
  EXPECT_GE(layersCut, 1);
}

TEST(TraceMinimizerScenarios, BuiltInEngineFaultsKeepTheirFinding) {
  for (const auto& [name, fault] : std::vector<std::pair<std::string, std::string>>{
           {"engine.wrong_layer", "wrong_layer:layer=2,source=1,step=2"},
           {"engine.duplicate_append", "duplicate_append:layer=1,step=2"},
           {"engine.wrong_position", "wrong_position:offset=1,step=2"},
           {"engine.cross_request", "cross_request:request=1,victim=0"},
           {"engine.stale_cache", "stale_cache:tick=3,layer=1"}}) {
    SCOPED_TRACE(name);
    AuditJobSpec spec;
    spec.modelDir = test::hfModel("llama");
    spec.promptIds = {{0, 34, 86, 69}, {0, 316, 284}};
    spec.arrivalTicks = {0, 2};
    spec.maxNewTokens = 6;
    spec.faults = {fault};
    AuditJobSpec save = spec;  // the engine's trace as a file: the bytes a bug report would carry
    save.saveTraceTo = (scenarioDir() / (name + ".kvtrace")).string();
    runAuditJob(save);
    const ScenarioRow row = minimizeAndReaudit(name, spec, bytes(save.saveTraceTo));
    if (name == "engine.wrong_layer" || name == "engine.duplicate_append") {
      EXPECT_LT(row.layersAfter, row.layersBefore) << row.kept;
    }
  }
}
