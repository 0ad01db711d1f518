#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Error.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(KVSCOPE_FIXTURES_DIR) + "/hf/models/";

using kvscope::test::freshDir;

// Every file under `dir` with its size and modification time.
std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, e.last_write_time()};
  return out;
}

InputError openError(const fs::path& dir) {
  try {
    Checkpoint::open(dir.string());
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError opening " << dir;
  return InputError("", "", "");
}

CheckpointSpec shardedSpec() {
  CheckpointSpec s = CheckpointSpec::demo();
  s.numShards = 3;
  s.vocabSize = 300;
  return s;
}

bool isHex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

TEST(Checkpoint, OpensBothFixtures) {
  const auto gpt2 = Checkpoint::open(kModels + "gpt2");
  const auto llama = Checkpoint::open(kModels + "llama");
  EXPECT_EQ(gpt2->storedDtype(), "F32");
  EXPECT_EQ(llama->storedDtype(), "F32");
  EXPECT_EQ(gpt2->config().architecture, Architecture::Gpt2);
  EXPECT_EQ(llama->config().architecture, Architecture::Llama);
  EXPECT_EQ(gpt2->tensorNames().size(), 40u);      // 3 layers x 12 + wte, wpe, ln_f x 2
  EXPECT_EQ(llama->tensorNames().size(), 30u);     // 3 layers x 9 + embed, norm, lm_head
  EXPECT_FALSE(gpt2->contains("lm_head.weight"));  // tied
  EXPECT_TRUE(llama->contains("lm_head.weight"));
  EXPECT_EQ(llama->entry("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(gpt2->weightFiles().size(), 1u);

  EXPECT_TRUE(isHex64(gpt2->fingerprint())) << gpt2->fingerprint();
  EXPECT_TRUE(isHex64(llama->fingerprint())) << llama->fingerprint();
  EXPECT_NE(gpt2->fingerprint(), llama->fingerprint());
  EXPECT_EQ(Checkpoint::open(kModels + "gpt2")->fingerprint(), gpt2->fingerprint());
  EXPECT_EQ(Checkpoint::open(kModels + "llama")->fingerprint(), llama->fingerprint());
}

TEST(Checkpoint, MissingTensorNamesTheTensor) {
  const auto gpt2 = Checkpoint::open(kModels + "gpt2");
  try {
    gpt2->entry("lm_head.weight");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "lm_head.weight");
    EXPECT_NE(e.file().find("model.safetensors"), std::string::npos);
  }
}

TEST(Checkpoint, OpensShardedCheckpointWithEveryTensorResolvable) {
  const fs::path dir = freshDir("sharded");
  const CheckpointWriter writer(shardedSpec());
  writer.write(dir.string());
  const auto ck = Checkpoint::open(dir.string());
  EXPECT_EQ(ck->weightFiles().size(), 3u);
  std::set<std::string> planned;
  for (const auto& t : writer.tensors()) planned.insert(t.name);
  const auto names = ck->tensorNames();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), planned);
  std::set<std::string> shardsUsed;
  for (const auto& t : writer.tensors()) {
    const auto& file = ck->fileFor(t.name);
    shardsUsed.insert(fs::path(file.path()).filename().string());
    EXPECT_EQ(file.entry(t.name).shape, t.shape) << t.name;
    EXPECT_EQ(file.readFloat(t.name), writer.makeTensor(t)) << t.name;
  }
  EXPECT_EQ(shardsUsed, (std::set<std::string>{"model-00001-of-00003.safetensors",
                                               "model-00002-of-00003.safetensors",
                                               "model-00003-of-00003.safetensors"}));
  // The fingerprint covers the weights: a different seed changes it.
  CheckpointSpec other = shardedSpec();
  other.seed = 1;
  const fs::path dir2 = freshDir("sharded-seed1");
  CheckpointWriter(other).write(dir2.string());
  EXPECT_NE(Checkpoint::open(dir2.string())->fingerprint(), ck->fingerprint());
}

TEST(Checkpoint, IndexNamingMissingShardIsAnInputError) {
  const fs::path dir = freshDir("missing-shard");
  CheckpointWriter(shardedSpec()).write(dir.string());
  fs::remove(dir / "model-00002-of-00003.safetensors");
  const auto e = openError(dir);
  EXPECT_EQ(e.file(), (dir / "model.safetensors.index.json").string());
  EXPECT_EQ(e.field().rfind("weight_map.", 0), 0u) << e.field();
  EXPECT_NE(std::string(e.what()).find("model-00002-of-00003.safetensors"), std::string::npos)
      << e.what();
}

TEST(Checkpoint, IndexListingTensorAbsentFromShardIsAnInputError) {
  const fs::path dir = freshDir("absent-tensor");
  CheckpointWriter(shardedSpec()).write(dir.string());
  const fs::path indexPath = dir / "model.safetensors.index.json";
  nlohmann::json index;
  {
    std::ifstream in(indexPath);
    index = nlohmann::json::parse(in);
  }
  index["weight_map"]["model.layers.7.self_attn.q_proj.weight"] =
      "model-00001-of-00003.safetensors";
  {
    std::ofstream out(indexPath);
    out << index.dump(2);
  }
  const auto e = openError(dir);
  EXPECT_EQ(e.field(), "model.layers.7.self_attn.q_proj.weight");
  EXPECT_EQ(e.file(), (dir / "model-00001-of-00003.safetensors").string());
}

TEST(Checkpoint, PickleOnlyDirectoryIsRefusedWithAdvice) {
  const fs::path dir = freshDir("pickle-only");
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "pytorch_model.bin", std::ios::binary);
    out << "PK\x03\x04 not really a zip";
  }
  const auto before = snapshot(dir);
  const auto e = openError(dir);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("pytorch_model.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pickle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("arbitrary code"), std::string::npos) << msg;           // why
  EXPECT_NE(msg.find("safe_serialization=True"), std::string::npos) << msg;  // how to convert
  EXPECT_EQ(snapshot(dir), before);

  // The same with a config.json beside it.
  fs::copy_file(kModels + "llama/config.json", dir / "config.json");
  const std::string msg2 = openError(dir).what();
  EXPECT_NE(msg2.find("pickle"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("save_pretrained"), std::string::npos) << msg2;
}

TEST(Checkpoint, EmptyOrMissingDirectoryIsAnInputError) {
  const fs::path dir = freshDir("empty");
  fs::create_directories(dir);
  const auto e = openError(dir);
  EXPECT_EQ(e.file(), dir.string());
  EXPECT_NE(std::string(e.what()).find("empty directory"), std::string::npos) << e.what();
  EXPECT_TRUE(fs::is_empty(dir));

  const auto missing = openError(dir / "nope");
  EXPECT_EQ(missing.file(), (dir / "nope").string());

  // Weights without config.json.
  const fs::path noConfig = freshDir("no-config");
  fs::create_directories(noConfig);
  fs::copy_file(kModels + "llama/model.safetensors", noConfig / "model.safetensors");
  const auto nc = openError(noConfig);
  EXPECT_EQ(nc.file(), (noConfig / "config.json").string());
}

TEST(Checkpoint, OpeningNeverModifiesTheDirectory) {
  const fs::path dir = freshDir("untouched");
  CheckpointWriter(shardedSpec()).write(dir.string());
  for (const fs::path& d : {dir, fs::path(kModels + "llama"), fs::path(kModels + "gpt2")}) {
    const auto before = snapshot(d);
    {
      const auto ck = Checkpoint::open(d.string());
      (void)ck->fingerprint();
      for (const auto& n : ck->tensorNames()) (void)ck->fileFor(n).readFloat(n);
    }
    EXPECT_EQ(snapshot(d), before) << d;
  }
}
