// kvscope-cli inspect end to end: the terminal view of one step names the divergent layer
// and kv head at once (header, layer overview, heatmap heading) on the demo audit and on a
// transformers-recorded scenario; plain text when stdout is not a terminal; the compact view
// fits 80x24 (or --width x --height, $COLUMNS x $LINES) with the verdict and the first check
// on top, every line within the width, coloured or not; bad points and values exit 2.
#include <gtest/gtest.h>

#include <algorithm>
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
  const CliRun r = inspect(demoArgs(), {"--full", "--width", "100"});
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
      inspect(demoArgs(), {"--full", "--width", "100", "--step", "3", "--layer", "0", "--head", "0",
                           "--kind", "v"});
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
  const CliRun other = inspect(demoArgs(), {"--full", "--request", "1"});
  ASSERT_TRUE(other.exitedWith(1)) << other;
  EXPECT_TRUE(has(lineWith(other.out, "shown: "), "request 1, step 0 (prefill), layer 2")) << other;
}

TEST(CliInspect, ColourOnlyWhenAskedOrOnATerminal) {
  const CliRun r = inspect(demoArgs(), {"--full", "--color", "always", "--rows", "4"});
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
  const CliRun r = inspect({"--model", demoModel(), "--prompt", "hello there", "--max-new", "3", "--full"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_TRUE(has(r.out, "verdict: clean")) << r;
  EXPECT_TRUE(has(r.out, "first divergence: none")) << r;
  EXPECT_TRUE(has(lineWith(r.out, "shown: "), "request 0, step 0 (prefill), layer 0")) << r;
  // The paragraph wraps where the numbers' widths put it: read it as one line.
  std::string flowing;
  for (const char c : r.out)
    if (c != '\n' && !(c == ' ' && !flowing.empty() && flowing.back() == ' ')) flowing += c;
    else if (c == '\n' && !flowing.empty() && flowing.back() != ' ') flowing += ' ';
  EXPECT_TRUE(has(flowing, "(noise, under ")) << r;
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
  const CliRun r = inspect({"--model", hfModel("gpt2"), "--trace", trace, "--width", "120", "--full"});
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

namespace {

// Terminal columns of a line: escape sequences count zero, a code point one (the demo draws
// no wide characters).
size_t columns(const std::string& line) {
  size_t n = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      if (i + 1 < line.size() && line[i + 1] == '[') {
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
      } else {
        ++i;
      }
      continue;
    }
    n += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  }
  return n;
}

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void expectFits(const CliRun& r, size_t width, size_t height) {
  const auto lines = linesOf(r.out);
  EXPECT_LE(lines.size(), height) << r;
  for (const auto& l : lines) EXPECT_LE(columns(l), width) << l;
}

const std::vector<std::string> kNoSize = {"COLUMNS", "LINES"};

}  // namespace

TEST(CliInspect, CompactViewFitsEightyByTwentyFourWithTheVerdictAndFirstCheck) {
  // Piped, without --width, $COLUMNS or $LINES: 80 x 24.
  for (const char* color : {"never", "always"}) {
    SCOPED_TRACE(color);
    const CliRun r = runKvscopeCli(
        [&] {
          std::vector<std::string> a{"inspect"};
          for (const auto& x : demoArgs()) a.push_back(x);
          a.insert(a.end(), {"--color", color});
          return a;
        }(),
        kNoSize);
    ASSERT_TRUE(r.exitedWith(1)) << r;
    expectFits(r, 80, 24);
    const auto lines = linesOf(r.out);
    ASSERT_GE(lines.size(), 20u) << "the height is used\n" << r;
    EXPECT_TRUE(has(lines[0], "verdict: ")) << r;
    EXPECT_TRUE(has(lines[0], "DIVERGENT")) << r;
    EXPECT_TRUE(has(r.out, "first divergence: ")) << r;
    EXPECT_TRUE(has(r.out, "request 0, step 0, layer 2")) << r;
    // The first check of the root finding, as `audit` prints it ("-> check ...").
    EXPECT_TRUE(has(lineWith(r.out, "first check: "), "layer 2's cache source and append")) << r;
    EXPECT_TRUE(has(lineWith(r.out, "first check: "), "(wrong_layer)")) << r;
    EXPECT_TRUE(has(lineWith(r.out, "shown: "), "layer 2, kv head ")) << r;
    // Every part is there, the heatmap with the rows that fit.
    EXPECT_TRUE(has(r.out, "\u25B6 layer 2")) << r;
    EXPECT_TRUE(has(r.out, "logits: max |\u0394logit| ")) << r;
    EXPECT_TRUE(has(r.out, "here: ")) << r;
    EXPECT_TRUE(has(r.out, "wrong_layer")) << r;
    EXPECT_TRUE(has(lineWith(r.out, "  pos 13 "), "\u25C0"))
        << "the largest difference's row is among those shown\n"
        << r;
  }
  const CliRun clean = runKvscopeCli(
      {"inspect", "--model", demoModel(), "--prompt", "hello there", "--max-new", "3"}, kNoSize);
  ASSERT_TRUE(clean.exitedWith(0)) << clean;
  expectFits(clean, 80, 24);
  EXPECT_TRUE(has(clean.out, "first check: none, the audit is clean")) << clean;
}

TEST(CliInspect, SizeComesFromTheOptionsElseTheEnvironment) {
  std::vector<std::string> args{"inspect"};
  for (const auto& x : demoArgs()) args.push_back(x);
  const CliRun env = runKvscopeCli(args, {"COLUMNS=60", "LINES=16"});
  ASSERT_TRUE(env.exitedWith(1)) << env;
  expectFits(env, 60, 16);
  EXPECT_TRUE(has(env.out, "first check: ")) << env;
  auto sized = args;
  sized.insert(sized.end(), {"--width", "120", "--height", "40"});
  const CliRun opt = runKvscopeCli(sized, {"COLUMNS=60", "LINES=16"});
  ASSERT_TRUE(opt.exitedWith(1)) << opt;
  expectFits(opt, 120, 40);
  EXPECT_GT(linesOf(opt.out).size(), 24u) << "a taller view draws more rows\n" << opt;
}

TEST(CliInspect, FullViewHonoursTheWidthStrictly) {
  // The layer lines with their tags, the scales and the heatmap with its ◀ once ran over.
  for (const char* width : {"80", "40"})
    for (const char* color : {"never", "always"}) {
      SCOPED_TRACE(std::string(width) + " " + color);
      const CliRun r = inspect(demoArgs(), {"--full", "--width", width, "--color", color});
      ASSERT_TRUE(r.exitedWith(1)) << r;
      expectFits(r, static_cast<size_t>(std::stoi(width)), 1000);
      EXPECT_TRUE(has(r.out, "first check: ")) << r;
      EXPECT_TRUE(has(r.out, "elsewhere: ")) << r;
    }
}

TEST(CliInspect, OutOfRangeValuesSayWhatIsAccepted) {
  const CliRun rows = inspect(demoArgs(), {"--rows", "0"});
  EXPECT_TRUE(rows.exitedWith(2)) << rows;
  EXPECT_TRUE(has(rows.err, "--rows: 0 is out of range: give a whole number from 1 to 100000"))
      << rows;
  EXPECT_FALSE(has(rows.err, "e+308")) << rows;
  const CliRun word = inspect(demoArgs(), {"--rows", "many"});
  EXPECT_TRUE(word.exitedWith(2)) << word;
  EXPECT_TRUE(has(word.err, "'many' is not a whole number: give a whole number from 1")) << word;
  const CliRun width = inspect(demoArgs(), {"--width", "20"});
  EXPECT_TRUE(width.exitedWith(2)) << width;
  EXPECT_TRUE(has(width.err, "--width: 20 is out of range: give a whole number from 40")) << width;
  const CliRun maxNew = inspect({"--model", demoModel(), "--prompt", "x", "--max-new", "0"});
  EXPECT_TRUE(maxNew.exitedWith(2)) << maxNew;
  EXPECT_TRUE(has(maxNew.err, "--max-new: 0 is out of range: give a whole number from 1"))
      << maxNew;
}
