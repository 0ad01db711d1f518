// llama.cpp sequence states as traces (tests/fixtures/llama_state, saved by llama.cpp itself
// through llama-cpp-python: make_llama_state_fixtures.py): every cache layout and type the
// fixtures hold (f16 with V row-wise and transposed, q8_0, q4_0; Llama's permuted key heads,
// Qwen3's unpermuted ones; Gemma 3's iswa cache, its sliding layers in a second cache) audits
// clean against the GGUF it was computed from (Gemma 3: against the HF checkpoint converted), so the rows are
// read, dequantised and un-permuted as llama.cpp wrote them; a prompt-cache reuse off by one
// token is found at the position it corrupted; damaged files and mismatched models are
// refused naming the file and the field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "TestSupport.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/LlamaStateTrace.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/TraceFileSniffer.hpp"
#include "trace/LlamaSeqState.hpp"

using namespace kvscope;

namespace {

std::string stateFixture(const std::string& name) { return test::fixture("llama_state/" + name); }

nlohmann::json states() {
  std::ifstream in(stateFixture("states.json"));
  return nlohmann::json::parse(in);
}

std::string modelOf(const std::string& state) {
  return (std::filesystem::path(test::fixture("")) / ".." / ".." /
          states()[state]["model"].get<std::string>())
      .lexically_normal()
      .string();
}

std::vector<uint8_t> bytesOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string writeTemp(const std::vector<uint8_t>& bytes, const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("kvscope-llama-state-" + name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                          static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

// `bytes` written to a scratch file and read against `checkpoint`: the refusal, which must name
// that file (a failure, and an empty error, when it is accepted).
InputError stateRefusal(const std::vector<uint8_t>& bytes, const std::string& name, const Checkpoint& checkpoint) {
  const std::string path = writeTemp(bytes, name);
  InputError refused(path, "", "");
  try {
    readLlamaStateTrace(path, checkpoint);
    ADD_FAILURE() << name << " was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
    refused = e;
  }
  std::filesystem::remove(path);
  return refused;
}

class LlamaStateAudit : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaStateAudit, AuditsCleanAgainstItsGguf) {
  const std::string name = GetParam();
  const auto info = states()[name];
  auto model = Model::load(modelOf(name));
  const Trace t = readLlamaStateTrace(stateFixture(name), model->checkpoint());
  ASSERT_EQ(t.steps.size(), 1u);
  const auto tokens = info["tokens"].get<std::vector<int64_t>>();
  EXPECT_EQ(t.requests[0].promptIds, tokens);
  std::vector<int64_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  EXPECT_EQ(t.steps[0].positions, positions);
  const std::string cache = info["cache"][0];
  EXPECT_EQ(t.kvCache.dtype, cache == "f16" ? "" : cache);
  EXPECT_EQ(t.tensorDtype, cache == "f16" ? "F16" : "F32");
  const auto r = Auditor::audit(*model, t);
  EXPECT_TRUE(r.report.clean()) << r.report.toText();
  EXPECT_EQ(r.report.stage(AuditStage::Cache)->status, StageStatus::Pass);
  EXPECT_EQ(r.report.stage(AuditStage::Stopping)->status, StageStatus::Skipped);  // not recorded
}

INSTANTIATE_TEST_SUITE_P(Saved, LlamaStateAudit,
                         ::testing::Values("hd32-f16.ggsq", "hd32-f16-vtrans.ggsq", "hd32-q8_0.ggsq",
                                           "hd32-q4_0.ggsq", "qwen3-f16.ggsq", "gemma3-swa-f16.ggsq"),
                         [](const auto& p) {
                           std::string s = p.param.substr(0, p.param.find('.'));
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

TEST(LlamaState, LayoutsAreReadAsWritten) {
  const auto rowWise = kvscope::detail::readLlamaSeqStateFile(stateFixture("hd32-f16.ggsq"));
  const auto transposed = kvscope::detail::readLlamaSeqStateFile(stateFixture("hd32-f16-vtrans.ggsq"));
  EXPECT_EQ(rowWise.version, 3u);
  EXPECT_FALSE(rowWise.valuesTransposed);
  EXPECT_TRUE(transposed.valuesTransposed);
  EXPECT_EQ(rowWise.cells(), 13);
  ASSERT_EQ(rowWise.keys.size(), 2u);
  EXPECT_EQ(rowWise.keys[0].width, 32);  // one kv head of 32
  // The same tokens through both attention paths: the first layer's values agree to f16.
  ASSERT_EQ(rowWise.values[0].rows.size(), transposed.values[0].rows.size());
  for (size_t i = 0; i < rowWise.values[0].rows.size(); ++i)
    ASSERT_NEAR(rowWise.values[0].rows[i], transposed.values[0].rows[i], 1e-3) << i;
  EXPECT_EQ(describeFile(stateFixture("hd32-q8_0.ggsq")).kind, FileKind::LlamaState);
  EXPECT_TRUE(isLlamaStateFile(stateFixture("hd32-q8_0.ggsq")));
}

TEST(LlamaState, PromptCacheReuseOffByOneIsFoundWhereItCorrupted) {
  auto model = Model::load(modelOf("hd32-reuse-off-by-one.ggsq"));
  const auto r = Auditor::audit(*model, readLlamaStateTrace(stateFixture("hd32-reuse-off-by-one.ggsq"),
                                                            model->checkpoint()));
  ASSERT_FALSE(r.report.clean());
  // Position 6 holds sequence 0's token: the first record that differs, at layer 0 (which
  // depends on the token alone); positions before it are the shared prefix and match.
  EXPECT_EQ(r.report.firstDivergence.layer, 0) << r.report.toText();
  EXPECT_EQ(r.report.firstDivergence.position, 6) << r.report.toText();
  // Token ownership, not the checkpoint: the 6 records before it in the same forward match.
  const Finding* f = r.report.finding("position");
  ASSERT_NE(f, nullptr) << r.report.toText();
  EXPECT_FALSE(r.report.hasFinding("reference")) << r.report.toText();
  EXPECT_EQ(f->position, 6);
  EXPECT_EQ(f->evidence.at("records_matching_before"), 6.0);
}

TEST(LlamaState, DamagedFilesNameTheField) {
  const auto good = bytesOf(stateFixture("hd32-f16.ggsq"));
  auto model = Model::load(modelOf("hd32-f16.ggsq"));
  const auto expectField = [&](std::vector<uint8_t> bytes, const std::string& name,
                               const std::string& field) {
    SCOPED_TRACE(name);
    const InputError e = stateRefusal(bytes, name, model->checkpoint());
    EXPECT_NE(e.field().find(field), std::string::npos) << e.what();
  };
  auto truncated = good;
  truncated.resize(good.size() - 7);
  expectField(truncated, "truncated", "layer 1 v rows");
  auto version = good;
  version[4] = 9;
  expectField(version, "version", "version");
  auto tokens = good;
  const uint32_t huge = 0x40000000u;
  std::memcpy(tokens.data() + 8, &huge, 4);
  expectField(tokens, "tokens", "n_token_count");
  auto fewer = good;  // one token fewer listed than cells: move the rest down by 4 bytes
  const uint32_t twelve = 12;
  std::memcpy(fewer.data() + 8, &twelve, 4);
  fewer.erase(fewer.begin() + 12 + 12 * 4, fewer.begin() + 12 + 13 * 4);
  expectField(fewer, "fewer-tokens", "n_token_count");
  auto type = good;  // layer 0's k_type follows the cells and v_trans, n_layer
  const size_t cellsEnd = 12 + 13 * 4 + 8 + 13 * 12;
  const int32_t iq = 23;
  std::memcpy(type.data() + cellsEnd + 8, &iq, 4);
  expectField(type, "k-type", "layer 0 k_type");
  expectField({'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0}, "magic", "magic");
}

TEST(LlamaState, OlderFilesAndGetDataBytesParse) {
  // Version 2 as llama.cpp wrote it before multi-stream caches (no stream count), and the
  // bytes llama_state_seq_get_data returns (io magic, sequence id, no tokens): from the f16 file.
  const auto good = bytesOf(stateFixture("hd32-f16.ggsq"));
  const size_t memory = 12 + 13 * 4;
  std::vector<uint8_t> v2(good.begin(), good.begin() + memory);
  v2[4] = 2;
  v2.insert(v2.end(), good.begin() + memory + 4, good.end());
  auto model = Model::load(modelOf("hd32-f16.ggsq"));
  const std::string v2Path = writeTemp(v2, "v2");
  const Trace old = readLlamaStateTrace(v2Path, model->checkpoint());
  EXPECT_EQ(old.engine, "llama.cpp sequence state (ggsq v2)");
  EXPECT_TRUE(Auditor::audit(*model, old).report.clean());
  std::filesystem::remove(v2Path);

  std::vector<uint8_t> blob = {0xd8, 0x3c, 0x14, 0xaf, 0, 0, 0, 0};
  blob.insert(blob.end(), good.begin() + memory, good.end());
  const auto s = kvscope::detail::parseLlamaSeqState(blob.data(), blob.size(), "blob");
  EXPECT_FALSE(s.hasTokens);
  EXPECT_EQ(s.seqId, 0);
  EXPECT_EQ(s.cells(), 13);
  const std::string blobPath = writeTemp(blob, "blob");
  try {
    readLlamaStateTrace(blobPath, model->checkpoint());
    ADD_FAILURE() << "a state without tokens was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "tokens") << e.what();
  }
  std::filesystem::remove(blobPath);
}

TEST(LlamaState, TheAuditJobReadsItWithTheModelAndItsOwnTokens) {
  AuditJobSpec spec;
  spec.modelDir = modelOf("hd32-f16.ggsq");
  spec.traceFile = stateFixture("hd32-f16.ggsq");
  EXPECT_TRUE(runAuditJob(spec).result.report.clean());
  spec.promptIds = {states()["hd32-f16.ggsq"]["tokens"].get<std::vector<int64_t>>()};
  EXPECT_TRUE(runAuditJob(spec).result.report.clean());  // the same tokens: agreed
  spec.promptIds = {{1, 2, 3}};
  try {
    runAuditJob(spec);
    ADD_FAILURE() << "other tokens were accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "tokens") << e.what();
  }
  AuditJobSpec noModel;
  noModel.traceFile = noModel.referenceTraceFile = stateFixture("hd32-f16.ggsq");
  EXPECT_THROW(runAuditJob(noModel), UsageError);
}

TEST(LlamaState, AnotherModelIsRefusedByName) {
  auto qwen = Model::load(modelOf("qwen3-f16.ggsq"));
  try {
    readLlamaStateTrace(stateFixture("hd32-f16.ggsq"), qwen->checkpoint());
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "n_layer") << e.what();  // 2 layers; the Qwen3 fixture has 3
  }
  auto gpt2 = Model::load(test::fixture("hf/models/gpt2"));
  try {
    readLlamaStateTrace(stateFixture("hd32-f16.ggsq"), gpt2->checkpoint());
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "model") << e.what();
  }
}

}  // namespace

// An iswa state (Gemma 3 in llama.cpp): the first cache holds the global layer (5), the second
// the five sliding ones, each in layer order; both hold all 7 cells, inside the window of 8.
TEST(LlamaState, IswaStateHoldsTheSlidingLayersInItsSecondCache) {
  const auto s = kvscope::detail::readLlamaSeqStateFile(stateFixture("gemma3-swa-f16.ggsq"));
  ASSERT_TRUE(s.second.has_value());
  EXPECT_EQ(s.keys.size(), 1u);
  EXPECT_EQ(s.second->keys.size(), 5u);
  EXPECT_EQ(s.cells(), 7);
  EXPECT_EQ(s.second->cells(), 7);
  EXPECT_EQ(s.second->keys[0].width, 32);  // two kv heads of 16

  // Placed wrongly, the rows show: the global layer's rows read as layer 0's.
  auto model = Model::load(modelOf("gemma3-swa-f16.ggsq"));
  auto swapped = s;
  std::swap(swapped.keys[0], swapped.second->keys[0]);
  std::swap(swapped.values[0], swapped.second->values[0]);
  const Trace t = kvscope::detail::traceFromLlamaState(swapped, model->config(), model->checkpoint().storedDtype(),
                                                       false);
  const auto r = Auditor::audit(*model, t);
  ASSERT_FALSE(r.report.clean());
  EXPECT_EQ(r.report.firstDivergence.layer, 0) << r.report.toText();
}

TEST(LlamaState, IswaStateBeyondTheWindowIsRefusedWithTheNumbers) {
  auto model = Model::load(modelOf("gemma3-swa-long.ggsq"));
  try {
    readLlamaStateTrace(stateFixture("gemma3-swa-long.ggsq"), model->checkpoint());
    ADD_FAILURE() << "a state missing the sliding layers' early rows was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "swa cell_count") << e.what();
    EXPECT_NE(e.detail().find("holds 8 cells (positions 6 to 13) of the sequence's 14"), std::string::npos)
        << e.what();
    EXPECT_NE(e.detail().find("window (8)"), std::string::npos) << e.what();
  }
}

TEST(LlamaState, IswaPromptCacheReuseOffByOneIsFoundWhereItCorrupted) {
  auto model = Model::load(modelOf("gemma3-swa-reuse-off-by-one.ggsq"));
  const auto r = Auditor::audit(
      *model, readLlamaStateTrace(stateFixture("gemma3-swa-reuse-off-by-one.ggsq"), model->checkpoint()));
  // Sequence 1 shares 3 tokens with sequence 0, but 4 cells were copied into both caches.
  const Finding* f = r.report.finding("position");
  ASSERT_NE(f, nullptr) << r.report.toText();
  EXPECT_EQ(f->position, 3);
  EXPECT_EQ(f->layer, 0);
  EXPECT_EQ(f->evidence.at("records_matching_before"), 3.0);
}

TEST(LlamaState, DamagedOrPartialIswaStatesNameTheField) {
  auto model = Model::load(modelOf("gemma3-swa-f16.ggsq"));
  const auto good = bytesOf(stateFixture("gemma3-swa-f16.ggsq"));
  const auto refused = [&](const std::vector<uint8_t>& bytes, const std::string& name) {
    return stateRefusal(bytes, name, model->checkpoint());
  };
  auto truncated = good;
  truncated.resize(good.size() - 5);
  EXPECT_EQ(refused(truncated, "iswa-truncated").field(), "swa layer 4 v rows");
  // The SWA cache alone, as LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY saves it: the header, then the
  // last cache (n_stream, cell_count, 7 cells of 12 bytes, v_trans, n_layer, 5 layers' K and V
  // of 7 f16 rows of 32 values, each with its type and row size).
  const size_t header = 12 + 7 * 4;
  const size_t swaBytes = 8 + 7 * 12 + 8 + 5 * 2 * (4 + 8 + 7 * 32 * 2);
  std::vector<uint8_t> partial(good.begin(), good.begin() + header);
  partial.insert(partial.end(), good.end() - static_cast<std::ptrdiff_t>(swaBytes), good.end());
  const InputError e = refused(partial, "iswa-partial");
  EXPECT_EQ(e.field(), "n_layer");
  EXPECT_NE(e.detail().find("PARTIAL_ONLY"), std::string::npos) << e.what();
}
