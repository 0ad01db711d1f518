#include "kvscope/CheckpointWriter.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "model/ByteLevelBpeBuilder.hpp"
#include "model/GaussianRng.hpp"
#include "model/HfConfigFiles.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNormNoise = 0.05;    // norm weights: 1 + N(0, 0.05)

// Writes `text` to a temporary name beside `path` and renames it into place.
void writeTextAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path.string(), "", "cannot write");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw InputError(path.string(), "", "write failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError(path.string(), "", "cannot move the finished file into place");
  }
}

// Files a loader could pick up as weights: refusing to leave foreign ones beside ours.
bool looksLikeWeights(const std::string& name) {
  const auto ends = [&](const std::string& suf) {
    return name.size() >= suf.size() &&
           name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
  };
  return ends(".safetensors") || ends(".safetensors.index.json") || ends(".bin") ||
         ends(".bin.index.json") || ends(".pt") || ends(".pth") || ends(".ckpt");
}

std::set<std::string> previousManifest(const fs::path& dir) {
  std::set<std::string> names;
  std::ifstream in(dir / CheckpointWriter::manifestName());
  if (!in) return names;
  try {
    const json doc = json::parse(in);
    for (const auto& n : doc.at("files")) {
      const auto name = n.get<std::string>();
      // Only plain names inside the directory; a tampered manifest cannot reach out.
      if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..")
        names.insert(name);
    }
  } catch (const json::exception&) {
    return {};  // unreadable manifest: treat every file as foreign
  }
  return names;
}

json specJson(const CheckpointSpec& s) {
  json j = json::object();
  j["architecture"] = architectureName(s.architecture);
  j["vocab_size"] = s.vocabSize;
  j["hidden_size"] = s.hiddenSize;
  j["num_layers"] = s.numLayers;
  j["num_heads"] = s.numHeads;
  j["num_kv_heads"] = s.numKvHeads;
  j["head_dim"] = s.resolvedHeadDim();
  j["intermediate_size"] = s.intermediateSize;
  j["max_positions"] = s.maxPositions;
  j["stored_dtype"] = safetensorsDtypeName(s.storedDtype);
  j["config_style"] = s.configStyle == ConfigStyle::V4 ? "v4" : "v5";
  j["shards"] = s.numShards;
  if (s.maxShardBytes > 0) j["max_shard_bytes"] = s.maxShardBytes;
  j["init_std"] = s.initStd;
  j["seed"] = s.seed;
  return j;
}

}  // namespace

int64_t CheckpointWriter::TensorPlan::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

CheckpointWriter::CheckpointWriter(CheckpointSpec spec) : spec_(std::move(spec)) {
  spec_.validate();
  plan_ = familyOf(spec_.architecture).demoTensors(spec_);
  if (spec_.maxShardBytes > 0) {  // save_pretrained's rule: the shard count follows the sizes
    const uint64_t el = safetensorsDtypeSize(spec_.storedDtype);
    uint64_t used = 0;
    spec_.numShards = 1;
    for (const auto& t : plan_) {
      const uint64_t b = static_cast<uint64_t>(t.numel()) * el;
      if (used > 0 && used + b > spec_.maxShardBytes) {
        ++spec_.numShards;
        used = 0;
      }
      used += b;
    }
  }
  if (spec_.numShards > static_cast<int64_t>(plan_.size()))
    throw UsageError("checkpoint spec: shards: " + std::to_string(spec_.numShards) +
                     " shards for only " + std::to_string(plan_.size()) + " tensors");
}

int64_t CheckpointWriter::parameterCount() const {
  int64_t n = 0;
  for (const auto& t : plan_) n += t.numel();
  return n;
}

uint64_t CheckpointWriter::weightBytes() const {
  return static_cast<uint64_t>(parameterCount()) * safetensorsDtypeSize(spec_.storedDtype);
}

std::string CheckpointWriter::shardFileName(int64_t shard) const {
  if (spec_.numShards == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05lld-of-%05lld.safetensors",
                static_cast<long long>(shard + 1), static_cast<long long>(spec_.numShards));
  return buf;
}

std::vector<std::string> CheckpointWriter::fileNames() const {
  std::vector<std::string> out;
  for (int64_t i = 0; i < spec_.numShards; ++i) out.push_back(shardFileName(i));
  if (spec_.numShards > 1) out.push_back("model.safetensors.index.json");
  for (const char* n : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", manifestName()})
    out.push_back(n);
  return out;
}

std::vector<int64_t> CheckpointWriter::shardAssignment() const {
  if (spec_.maxShardBytes > 0) {
    const uint64_t el = safetensorsDtypeSize(spec_.storedDtype);
    std::vector<int64_t> shard(plan_.size(), 0);
    uint64_t used = 0;
    int64_t cur = 0;
    for (size_t k = 0; k < plan_.size(); ++k) {
      const uint64_t b = static_cast<uint64_t>(plan_[k].numel()) * el;
      if (used > 0 && used + b > spec_.maxShardBytes) {
        ++cur;
        used = 0;
      }
      used += b;
      shard[k] = cur;
    }
    return shard;
  }
  // Fill shards in state-dict order, cutting near equal byte counts, like save_pretrained
  // with a max_shard_size of total / N; every shard gets at least one tensor.
  const int64_t n = spec_.numShards;
  const int64_t count = static_cast<int64_t>(plan_.size());
  const double total = static_cast<double>(parameterCount());
  std::vector<int64_t> shard(plan_.size(), 0);
  double start = 0;
  for (int64_t k = 0; k < count; ++k) {
    if (k > 0) {
      const int64_t prev = shard[static_cast<size_t>(k - 1)];
      auto want = static_cast<int64_t>(std::floor(start * static_cast<double>(n) / total));
      int64_t s = std::clamp(want, prev, prev + 1);
      s = std::max(s, n - (count - k));  // leave a tensor for every later shard
      shard[static_cast<size_t>(k)] = std::min(s, n - 1);
    }
    start += static_cast<double>(plan_[static_cast<size_t>(k)].numel());
  }
  return shard;
}

FloatTensor CheckpointWriter::makeTensor(const TensorPlan& t) const {
  GaussianRng rng(GaussianRng::streamSeed(spec_.seed, t.name));
  std::vector<float> data(static_cast<size_t>(t.numel()));
  for (auto& x : data) {
    const double z = rng.normal();
    switch (t.init) {
      case Init::Normal:
      case Init::Bias:
        x = static_cast<float>(t.std * z);
        break;
      case Init::NormWeight:
        x = static_cast<float>(1.0 + kNormNoise * z);
        break;
    }
  }
  return FloatTensor(t.shape, std::move(data));
}

std::vector<CheckpointWriter::WrittenFile> CheckpointWriter::write(const std::string& dirArg,
                                                                   bool force) const {
  const fs::path dir(dirArg);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw InputError(dirArg, "", "exists and is not a directory");
  const auto planned = fileNames();
  const std::set<std::string> plannedSet(planned.begin(), planned.end());
  std::vector<std::string> stale;
  if (fs::is_directory(dir, ec)) {
    std::vector<fs::directory_entry> entries;
    for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e);
    if (!entries.empty() && !force)
      throw InputError(dirArg, "",
                       "directory is not empty; choose a new or empty directory, or pass "
                       "--force to replace the files make-demo writes (other files are kept)");
    const auto previous = previousManifest(dir);
    for (const auto& e : entries) {
      const std::string name = e.path().filename().string();
      if (plannedSet.count(name)) {
        if (!e.is_regular_file() || e.is_symlink())
          throw InputError(e.path().string(), "", "is not a regular file; refusing to replace it");
      } else if (previous.count(name)) {
        // Only names this writer can produce: a tampered manifest cannot delete notes.
        const bool ours = looksLikeWeights(name) || name == "config.json" ||
                          name == "generation_config.json" || name == "tokenizer.json" ||
                          name == "tokenizer_config.json";
        if (ours && e.is_regular_file() && !e.is_symlink()) stale.push_back(name);
      } else if (looksLikeWeights(name)) {
        throw InputError(e.path().string(), "",
                         "make-demo did not write this weight file and would leave it beside "
                         "the new weights, where loaders could pick it up; move it away or "
                         "choose another directory");
      }
    }
  }
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw InputError(dirArg, "", "cannot create the directory");

  std::vector<WrittenFile> written;
  const auto record = [&](const fs::path& p) {
    written.push_back({fs::absolute(p).lexically_normal().string(), fs::file_size(p)});
  };
  // Weights, one shard at a time so only one shard's bytes are held in memory.
  const auto assignment = shardAssignment();
  json weightMap = json::object();
  for (int64_t s = 0; s < spec_.numShards; ++s) {
    std::vector<const TensorPlan*> members;
    for (size_t k = 0; k < plan_.size(); ++k)
      if (assignment[k] == s) members.push_back(&plan_[k]);
    // safetensors orders a file's tensors by name (all share one dtype here).
    std::sort(members.begin(), members.end(),
              [](const TensorPlan* a, const TensorPlan* b) { return a->name < b->name; });
    SafetensorsWriter w;
    w.setMetadata("format", "pt");
    for (const TensorPlan* t : members) {
      w.addFloat(t->name, makeTensor(*t), spec_.storedDtype);
      weightMap[t->name] = shardFileName(s);
    }
    const fs::path p = dir / shardFileName(s);
    w.write(p.string());
    record(p);
  }
  if (spec_.numShards > 1) {
    json index = json::object();
    index["metadata"] = {{"total_size", weightBytes()}};
    if (spec_.configStyle == ConfigStyle::V5)
      index["metadata"]["total_parameters"] = parameterCount();
    index["weight_map"] = weightMap;
    const fs::path p = dir / "model.safetensors.index.json";
    writeTextAtomically(p, hf::dumpPretty(index));
    record(p);
  }
  const ByteLevelBpeBuilder bpe(spec_.vocabSize);
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"config.json", hf::dumpPretty(hf::configJson(spec_))},
      {"generation_config.json", hf::dumpPretty(hf::generationConfigJson(spec_))},
      {"tokenizer.json", bpe.tokenizerJson().dump(2)},
      {"tokenizer_config.json", hf::dumpPretty(hf::tokenizerConfigJson(spec_, bpe.tokens()))},
  };
  for (const auto& [name, text] : texts) {
    writeTextAtomically(dir / name, text);
    record(dir / name);
  }
  for (const auto& name : stale) fs::remove(dir / name, ec);
  json manifest = json::object();
  manifest["generator"] = "kvscope-cli make-demo";
  manifest["files"] = planned;
  manifest["spec"] = specJson(spec_);
  writeTextAtomically(dir / manifestName(), hf::dumpPretty(manifest));
  record(dir / manifestName());
  return written;
}

}  // namespace kvscope
