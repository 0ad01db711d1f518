// kvscope-cli inspect end to end: the terminal view of one step names the divergent layer
// and kv head at once (header, layer overview, heatmap heading) on the demo audit and on a
// transformers-recorded scenario; plain text when stdout is not a terminal; bad points exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "CliRunner.hpp"
#include "PythonTools.hpp"
#include "TestSupport.hpp"

using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {

// The demo checkpoint, written once per test process by `kvscope-cli make-demo`.
const std::string& demoModel() {
  static const std::string dir = [] {
    const fs::path d = freshDir("cli-inspect-demo");
    const CliRun made = runKvscopeCli({"make-demo", d.string()});
    EXPECT_TRUE(made.exitedWith(0)) << made;
    return d.string();
  }();
  return dir;
}

// scripts/demo-args.sh: two requests, layer 2 stores layer 1's K/V, the second request
// overwrites the first one's cache row when it arrives at tick 3.
std::vector<std::string> demoArgs() {
  return {"--model",   demoModel(),
          "--prompt",  "The cache must hold exactly one record per layer and position.",
          "--prompt",  "A second request arrives.",
          "--arrival", "0",
          "--arrival", "3",
          "--max-new", "12",
          "--fault",   "wrong_layer:layer=2,source=1",
          "--fault",   "cross_request:request=1,victim=0"};
}

CliRun inspect(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
  args.insert(args.begin(), "inspect");
  args.insert(args.end(), more.begin(), more.end());
  return runKvscopeCli(args);
}

// The first line of `text` that contains `needle` ("" when none does).
std::string lineWith(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The kv head the header says it shows: "shown: ... kv head H of N".
std::string shownHead(const std::string& out) {
  const std::string shown = lineWith(out, "shown: ");
  const auto at = shown.find("kv head ");
  if (at == std::string::npos) return "";
  const auto begin = at + 8;
  return shown.substr(begin, shown.find(' ', begin) - begin);
}

}  // namespace

TEST(CliInspect, DemoShowsTheDivergentLayerAndHeadAtOnce) {
  const CliRun r = inspect(demoArgs(), {"--width", "100"});
  ASSERT_TRUE(r.exitedWith(1)) << r;
  EXPECT_FALSE(has(r.out, "\x1b[")) << "no colour when stdout is not a terminal\n" << r;
  // 1. Header: the verdict, the first divergence and the point shown.
  EXPECT_TRUE(has(r.out, "verdict: DIVERGENT")) << r;
  EXPECT_TRUE(has(r.out, "first divergence: request 0, step 0, layer 2")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "request 0, step 0 (prefill), layer 2, kv head "))
      << r;
  const std::string head = shownHead(r.out);
  ASSERT_FALSE(head.empty()) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "(differs most)")) << r;
  // 2. The token strip brackets the prefill, marked as the first divergent step.
  EXPECT_TRUE(has(r.out, "![")) << r;
  EXPECT_TRUE(has(r.out, "step 0: tick 0, ")) << r;
  // 3. The layer overview marks layer 2 (shown, over its tolerance, the first divergence).
  const std::string layer2 = lineWith(r.out, "layer 2  ");
  EXPECT_TRUE(has(layer2, "\u25B6 layer 2")) << r;
  EXPECT_TRUE(has(layer2, "over tol")) << r;
  EXPECT_TRUE(has(layer2, "first divergence")) << r;
  EXPECT_FALSE(has(lineWith(r.out, "layer 0  "), "over tol")) << r;
  EXPECT_FALSE(has(lineWith(r.out, "layer 1  "), "over tol")) << r;
  // 4. The heatmap heading names the layer and the same head; the new records are marked.
  EXPECT_TRUE(has(r.out, "K/V cache \u2014 layer 2, kv head " + head + ", ")) << r;
  EXPECT_TRUE(has(r.out, "reference | cached | |difference|")) << r;
  EXPECT_TRUE(has(r.out, "new records: positions 0-")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "  pos "), "\u25B6")) << r;
  EXPECT_TRUE(has(r.out, "scale  reference and cached: ' '"))
      << "plain shading with its numeric range\n"
      << r;
  EXPECT_TRUE(has(r.out, "|difference|: ' ' 0")) << r;
  // 5. Logits, 6. findings here and where the others are.
  EXPECT_TRUE(has(r.out, "max |\u0394logit| ")) << r;
  EXPECT_TRUE(has(r.out, "largest |\u0394|: ")) << r;
  EXPECT_TRUE(has(r.out, "[wrong_layer] layer 2")) << r;
  EXPECT_TRUE(has(r.out, "elsewhere: cross_request at --request 0 --step 3")) << r;
  // Every line fits the width asked for (wrapping, downsampling).
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    size_t columns = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 100u) << line;
  }
}

TEST(CliInspect, ChosenPointIsShownAsAsked) {
  // The step where request 1 arrives in request 0's cache row: the event, the finding.
  const CliRun r =
      inspect(demoArgs(), {"--step", "3", "--layer", "0", "--head", "0", "--kind", "v"});
  ASSERT_TRUE(r.exitedWith(1)) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "request 0, step 3, layer 0, kv head 0 of 2")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "V (values)")) << r;
  EXPECT_TRUE(has(r.out, "K/V cache \u2014 layer 0, kv head 0, V (values) after step 3")) << r;
  EXPECT_TRUE(has(r.out, "Layers \u2014 max |cached \u2212 reference| of V")) << r;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("  \\[[^\\] ]+\\]  ")))
      << "the step's one token is bracketed\n"
      << r;
  EXPECT_TRUE(has(r.out, "cached, rebuilt")) << "the overwritten row is rebuilt\n" << r;
  EXPECT_TRUE(has(r.out, "note: the engine's cache row was overwritten")) << r;
  EXPECT_TRUE(has(r.out, "req 1 arrives (tick 3), same row")) << r;
  EXPECT_TRUE(has(r.out, "Findings at request 0, step 3")) << r;
  EXPECT_TRUE(has(r.out, "[cross_request]")) << r;
  EXPECT_TRUE(has(r.out, "elsewhere: wrong_layer at --request 0 --step 0 --layer 2")) << r;
  // Another request: its own first divergent step.
  const CliRun other = inspect(demoArgs(), {"--request", "1"});
  ASSERT_TRUE(other.exitedWith(1)) << other;
  EXPECT_TRUE(has(lineWith(other.out, "shown: "), "request 1, step 0 (prefill), layer 2")) << other;
}

TEST(CliInspect, ColourOnlyWhenAskedOrOnATerminal) {
  const CliRun r = inspect(demoArgs(), {"--color", "always", "--rows", "4"});
  ASSERT_TRUE(r.exitedWith(1)) << r;
  EXPECT_TRUE(has(r.out, "\x1b[48;")) << "heatmap cells are coloured\n" << r;
  EXPECT_EQ(lineWith(r.out, "scale  reference and cached: ' '"), "") << "a gradient, not glyphs\n"
                                                                     << r;
  // Four of the prefill's 36 rows: a window around the largest difference.
  EXPECT_TRUE(has(r.out, " down (of 0-35; --rows for more)")) << r;
  EXPECT_FALSE(has(r.out, "is outside the rows shown")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "max |difference| "), " at position ")) << r;
}

TEST(CliInspect, CleanRunExitsZero) {
  const CliRun r = inspect({"--model", demoModel(), "--prompt", "hello there", "--max-new", "3"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_TRUE(has(r.out, "verdict: clean")) << r;
  EXPECT_TRUE(has(r.out, "first divergence: none")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "request 0, step 0 (prefill), layer 0")) << r;
  EXPECT_TRUE(has(r.out, "(noise, under ")) << r;
  EXPECT_TRUE(has(r.out, ": within")) << r;
  EXPECT_TRUE(has(r.out, "none here")) << r;
}

TEST(CliInspect, PointsTheAuditLacksExitTwoSayingWhatExists) {
  const CliRun step = inspect(demoArgs(), {"--step", "99"});
  EXPECT_TRUE(step.exitedWith(2)) << step;
  EXPECT_TRUE(has(step.err, "--step 99: request 0 has no such step (its steps: 0-11)")) << step;
  EXPECT_EQ(step.out, "") << step;
  const CliRun request = inspect(demoArgs(), {"--request", "7"});
  EXPECT_TRUE(request.exitedWith(2)) << request;
  EXPECT_TRUE(has(request.err, "requests: 0-1")) << request;
  const CliRun layer = inspect(demoArgs(), {"--layer", "3"});
  EXPECT_TRUE(layer.exitedWith(2)) << layer;
  EXPECT_TRUE(has(layer.err, "layers 0-2")) << layer;
  const CliRun head = inspect(demoArgs(), {"--head", "2"});
  EXPECT_TRUE(head.exitedWith(2)) << head;
  EXPECT_TRUE(has(head.err, "kv heads 0-1")) << head;
  const CliRun kind = inspect(demoArgs(), {"--kind", "q"});
  EXPECT_TRUE(kind.exitedWith(2)) << kind;
  // The audit's own input checks apply as they do to `audit`.
  const CliRun fault =
      inspect({"--model", demoModel(), "--prompt", "x", "--fault", "no_such_fault"});
  EXPECT_TRUE(fault.exitedWith(2)) << fault;
}

TEST(CliInspect, TransformersScenarioShowsTheReplacedLayer) {
  SKIP_WITHOUT_PYTHON();
  // transformers' own decode loop with layer 1's cache replaced by layer 0's from step 1.
  const auto dir = freshDir("cli-inspect-scenario");
  fs::create_directories(dir);
  const auto trace = (dir / "wrong_layer.kvtrace").string();
  const auto repo = toolsDir().parent_path();
  const auto convert = run(std::string(kPython) + " " +
                           quote((repo / "tests/scenarios/scenario_to_trace.py").string()) + " " +
                           quote(fixture("hf/scenarios/gpt2.wrong_layer.json")) + " " +
                           quote(hfModel("gpt2")) + " " + quote(trace));
  ASSERT_EQ(convert.status, 0) << convert.output;
  const CliRun r = inspect({"--model", hfModel("gpt2"), "--trace", trace, "--width", "120"});
  ASSERT_TRUE(r.exitedWith(1)) << r;
  EXPECT_TRUE(has(r.out, "first divergence: request 0, step 1, layer 1")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "request 0, step 1, layer 1, kv head ")) << r;
  const std::string head = shownHead(r.out);
  ASSERT_FALSE(head.empty()) << r;
  const std::string layer1 = lineWith(r.out, "layer 1  ");
  EXPECT_TRUE(has(layer1, "\u25B6 layer 1")) << r;
  EXPECT_TRUE(has(layer1, "first divergence")) << r;
  EXPECT_FALSE(has(lineWith(r.out, "layer 0  "), "over tol")) << r;
  EXPECT_TRUE(has(r.out, "K/V cache \u2014 layer 1, kv head " + head + ", ")) << r;
  EXPECT_TRUE(has(r.out, "new record: position 15")) << r;
  EXPECT_TRUE(has(r.out, "![")) << "the decode step is bracketed and marked divergent\n" << r;
  EXPECT_TRUE(has(r.out, "[wrong_layer] layer 1")) << r;
  // Its steps are named when one is missing.
  const CliRun bad = inspect({"--model", hfModel("gpt2"), "--trace", trace, "--step", "40"});
  EXPECT_TRUE(bad.exitedWith(2)) << bad;
  EXPECT_TRUE(has(bad.err, "its steps: 0-10")) << bad;
}
