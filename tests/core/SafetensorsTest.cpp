#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {
fs::path safetensorsDir() {
  auto d = fs::temp_directory_path() / ("kvscope-st-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
void writeRaw(const fs::path& p, const std::string& header, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}
std::string expectInputError(const fs::path& p) {
  try {
    SafetensorsFile::open(p.string());
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), p.string());
    return e.what();
  }
  ADD_FAILURE() << "no InputError for " << p;
  return "";
}
}  // namespace

TEST(Safetensors, ReadsGoldenFixtureTensors) {
  auto f = SafetensorsFile::open(KVSCOPE_FIXTURES_DIR "/hf/golden/llama.safetensors");
  auto mask = f->readInt64("batch.attention_mask");
  EXPECT_EQ(f->entry("batch.attention_mask").shape, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(mask.size(), 32u);
  auto logits = f->readFloat("p0.prompt_logits");
  EXPECT_EQ(logits.shape, (std::vector<int64_t>{16, 1200}));
  EXPECT_GT(logits.maxAbs(), 0.0f);
  EXPECT_EQ(f->metadata().at("json"), "{\"model\": \"llama\"}");
}

TEST(Safetensors, WriterRoundTripsAllFloatDtypesAndMetadata) {
  auto dir = safetensorsDir();
  FloatTensor t({2, 3}, {1.0f, -2.5f, 3.140625f, 0.0f, 65504.0f, 1e-3f});
  SafetensorsWriter w;
  w.setMetadata("k", "v");
  w.addFloat("a", t, SafetensorsDtype::F32);
  w.addFloat("b", t, SafetensorsDtype::F16);
  w.addFloat("c", t, SafetensorsDtype::BF16);
  w.addInt64("ids", {3}, {7, -1, 42});
  w.write((dir / "rt.safetensors").string());
  auto f = SafetensorsFile::open((dir / "rt.safetensors").string());
  EXPECT_EQ(f->readFloat("a"), t);
  auto b = f->readFloat("b");
  auto c = f->readFloat("c");
  for (size_t i = 0; i < t.data.size(); ++i) {
    EXPECT_NEAR(b.data[i], t.data[i], std::fabs(t.data[i]) * 1e-3 + 1e-6) << i;
    EXPECT_NEAR(c.data[i], t.data[i], std::fabs(t.data[i]) * 8e-3 + 1e-6) << i;
  }
  EXPECT_EQ(f->readInt64("ids"), (std::vector<int64_t>{7, -1, 42}));
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->entry("b").dtype, SafetensorsDtype::F16);
}

TEST(Safetensors, HalfConversionsAreExactOnRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(halfToFloat(floatToHalf(v)), v) << v;
  }
  for (float v : {1.0f, -3.0f, 0.15625f, 1.2676506002282294e30f}) EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(v)), v);
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(1e6f))));
}

TEST(Safetensors, TruncatedFileIsAnInputError) {
  auto p = safetensorsDir() / "short.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_NE(expectInputError(p).find("header length"), std::string::npos);
}

TEST(Safetensors, HeaderLengthBeyondFileIsAnInputError) {
  auto p = safetensorsDir() / "hdr.safetensors";
  {
    std::ofstream out(p, std::ios::binary);
    uint64_t n = 1000;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  EXPECT_NE(expectInputError(p).find("header claims 1000 bytes"), std::string::npos);
}

TEST(Safetensors, OutOfRangeOffsetsAreAnInputError) {
  auto p = safetensorsDir() / "range.safetensors";
  writeRaw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  auto msg = expectInputError(p);
  EXPECT_NE(msg.find("w.data_offsets"), std::string::npos) << msg;
  EXPECT_NE(msg.find("beyond the data buffer"), std::string::npos) << msg;
}

TEST(Safetensors, OverlappingOffsetsAreAnInputError) {
  auto p = safetensorsDir() / "overlap.safetensors";
  writeRaw(p,
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, '\0'));
  EXPECT_NE(expectInputError(p).find("overlaps"), std::string::npos);
}

TEST(Safetensors, UnknownDtypeIsAnInputError) {
  auto p = safetensorsDir() / "dtype.safetensors";
  writeRaw(p, R"({"a":{"dtype":"F8_E9","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0'));
  auto msg = expectInputError(p);
  EXPECT_NE(msg.find("a.dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F8_E9"), std::string::npos) << msg;
}

TEST(Safetensors, ShapeSizeMismatchIsAnInputError) {
  auto p = safetensorsDir() / "size.safetensors";
  writeRaw(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_NE(expectInputError(p).find("need 12"), std::string::npos);
}

TEST(Safetensors, InvalidJsonHeaderIsAnInputError) {
  auto p = safetensorsDir() / "json.safetensors";
  writeRaw(p, R"({"a":{"dtype")", "");
  EXPECT_NE(expectInputError(p).find("invalid JSON"), std::string::npos);
}

TEST(Safetensors, MissingTensorNamesTheTensor) {
  auto f = SafetensorsFile::open(KVSCOPE_FIXTURES_DIR "/hf/golden/gpt2.safetensors");
  try {
    f->entry("nope");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "nope");
  }
}

TEST(Safetensors, WriterRefusesToOverwriteWhenAsked) {
  auto p = safetensorsDir() / "keep.safetensors";
  std::ofstream(p) << "user data";
  SafetensorsWriter w;
  w.addInt64("x", {1}, {1});
  EXPECT_THROW(w.write(p.string(), /*overwrite=*/false), InputError);
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  EXPECT_EQ(s, "user data");
}
