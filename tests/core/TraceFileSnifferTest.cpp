// describeFile / notATraceMessage: the cheap look at a file a user picks as a trace. Real
// files: a trace the engine records and writes, a fixture trace, a model's safetensors and
// config.json, a tokenizer, plus the wrong files a user picks by mistake.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceFileSniffer.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

fs::path dir() {
  static const fs::path d = [] {
    fs::path p = test::freshDir("trace-sniffer");
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string write(const std::string& name, const std::string& bytes) {
  const fs::path p = dir() / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

}  // namespace

TEST(TraceFileSniffer, RecognisesATraceTheEngineWrote) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec r;
  r.promptIds = {0, 34, 86};
  r.maxNewTokens = 2;
  r.stopAtEos = false;
  const Trace trace = Engine(model).run({r}, EngineOptions{});
  const std::string path = (dir() / "engine.kvtrace").string();
  TraceFile::write(trace, path);
  const FileSniff s = describeFile(path);
  EXPECT_EQ(s.kind, FileKind::KvTrace);
  EXPECT_TRUE(s.isTrace());
  EXPECT_EQ(notATraceMessage(path), "");
}

TEST(TraceFileSniffer, RecognisesAVersion1Trace) {
  EXPECT_TRUE(describeFile(test::fixture("traces-v1/example.kvtrace")).isTrace());
}

TEST(TraceFileSniffer, ModelWeightsAreSafetensorsButNotATrace) {
  const std::string weights = test::hfModel("llama") + "/model.safetensors";
  const FileSniff s = describeFile(weights);
  EXPECT_EQ(s.kind, FileKind::Safetensors);
  const std::string m = notATraceMessage(s);
  EXPECT_EQ(m.rfind("this is not a .kvtrace file (it looks like a safetensors file", 0), 0u) << m;
  EXPECT_NE(m.find("open its folder as the model directory"), std::string::npos) << m;
}

TEST(TraceFileSniffer, ConfigAndTokenizerJsonLookLikeJson) {
  for (const char* name : {"config.json", "tokenizer.json"}) {
    const FileSniff s = describeFile(test::hfModel("llama") + "/" + name);
    EXPECT_EQ(s.kind, FileKind::Json) << name;
    EXPECT_EQ(notATraceMessage(s).rfind("this is not a .kvtrace file (it looks like JSON)", 0), 0u)
        << notATraceMessage(s);
  }
  // A BOM and leading blank lines are still JSON; so is JSON lines.
  EXPECT_EQ(describeFile(write("bom.json", "\xEF\xBB\xBF\n  [1, 2]")).kind, FileKind::Json);
  EXPECT_EQ(describeFile(write("x.jsonl", "{\"a\": 1}\n{\"a\": 2}\n")).kind, FileKind::Json);
}

TEST(TraceFileSniffer, NamesOtherWrongFiles) {
  struct Case {
    std::string bytes;
    FileKind kind;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"", FileKind::Empty, "an empty file"},
      {"The cache must hold one record per layer.\n", FileKind::Text, "text"},
      {std::string("\x1f\x8b\x08\0\0\0\0\0", 8), FileKind::Gzip, "a gzip archive"},
      {std::string("PK\x03\x04\x14\0\0\0", 8), FileKind::Zip, "a zip archive"},
      {std::string("\x80\x04\x95\x10\0\0\0\0", 8), FileKind::Pickle, "a Python pickle"},
      {"GGUF\x03\0\0\0", FileKind::Gguf, "a GGUF model"},
      {std::string("\x93NUMPY\x01\0", 8), FileKind::Numpy, "a NumPy"},
      {"\x89PNG\r\n\x1a\n", FileKind::Image, "an image"},
      {std::string("\x01\x02\x03\xfe\xff\0\0\0\x10\x11", 10), FileKind::Binary, "binary data"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = write("wrong" + std::to_string(i++), c.bytes);
    const FileSniff s = describeFile(path);
    EXPECT_EQ(s.kind, c.kind) << c.words;
    EXPECT_NE(s.looksLike.find(c.words), std::string::npos) << s.looksLike;
    EXPECT_NE(notATraceMessage(s).find("this is not a .kvtrace file (it looks like " + c.words),
              std::string::npos)
        << notATraceMessage(s);
  }
}

TEST(TraceFileSniffer, SafetensorsWithAnotherFormatSaysWhichOne) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int b = 0; b < 8; ++b)
    bytes[static_cast<size_t>(b)] = static_cast<char>((header.size() >> (8 * b)) & 0xFF);
  bytes += header + std::string(4, '\0');
  const FileSniff s = describeFile(write("pt.safetensors", bytes));
  EXPECT_EQ(s.kind, FileKind::Safetensors);
  EXPECT_NE(s.detail.find("format \"pt\""), std::string::npos) << s.detail;
}

TEST(TraceFileSniffer, FoldersAndMissingPaths) {
  EXPECT_EQ(describeFile(test::hfModel("llama")).kind, FileKind::Directory);
  EXPECT_NE(notATraceMessage(test::hfModel("llama")).find("folder"), std::string::npos);
  EXPECT_EQ(describeFile((dir() / "nope.kvtrace").string()).kind, FileKind::Missing);
  EXPECT_EQ(notATraceMessage((dir() / "nope.kvtrace").string()), "no such file");
}

TEST(TraceFileSniffer, ATruncatedTraceHeaderIsNotCalledATrace) {
  // The header length claims more bytes than the file has: the reader would fail; the
  // sniffer must not call it a trace either.
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(200);
  bytes += R"({"__metadata__":{"format":"kvtrace"})";
  EXPECT_FALSE(describeFile(write("short.kvtrace", bytes)).isTrace());
}
