#include "kvscope/Checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "gguf/GgmlBlocks.hpp"
#include "gguf/GgufModelView.hpp"
#include "kvscope/Error.hpp"
#include "model/FingerprintCache.hpp"
#include "model/families/ModelFamily.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

namespace fs = std::filesystem;

namespace {

std::string pickleAdvice(const fs::path& dir, const std::string& found) {
  return "only PyTorch pickle weights (" + found +
         ") were found; KV Scope does not load pickle files because unpickling executes "
         "arbitrary code. Convert once with Python: "
         "AutoModelForCausalLM.from_pretrained('" + dir.string() +
         "').save_pretrained(OUT, safe_serialization=True)";
}

// The one *.gguf file of a directory without config.json ("" when there is none).
std::string ggufIn(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".gguf") found.push_back(e.path().string());
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    throw InputError(dir.string(), "", "holds " + std::to_string(found.size()) + " GGUF files (" + found[0] + ", " +
                                           found[1] + (found.size() > 2 ? ", ..." : "") + "): give the one to read");
  }
  return found.empty() ? "" : found[0];
}

}  // namespace

std::shared_ptr<const Checkpoint> Checkpoint::openGguf(const std::string& path) {
  auto ck = std::shared_ptr<Checkpoint>(new Checkpoint());
  auto file = GgufFile::open(path);
  ck->gguf_ = std::make_shared<const detail::GgufModelView>(file);
  ck->directory_ = fs::absolute(fs::path(path)).lexically_normal().string();  // the file reopens it
  ck->configPath_ = path;
  ck->config_ = ModelConfig::fromJson(ck->gguf_->config(), path);
  ck->config_.rope.frequencyFactors = ck->gguf_->frequencyFactors();
  std::set<std::string> types;
  for (const auto& [name, w] : ck->gguf_->weights())
    if (w.shape.size() >= 2) types.insert(detail::ggmlTypeName(w.tensor->type));
  std::string joined;
  for (const auto& t : types) joined += (joined.empty() ? "" : ", ") + t;
  ck->storedDtype_ = types.size() == 1 ? *types.begin() : "mixed (" + joined + ")";
  ck->startFingerprint();
  return ck;
}

std::shared_ptr<const Checkpoint> Checkpoint::open(const std::string& dirArg) {
  auto ck = std::shared_ptr<Checkpoint>(new Checkpoint());
  fs::path dir(dirArg);
  if (fs::is_regular_file(dir) && dir.extension() == ".gguf") return openGguf(dirArg);
  if (fs::is_directory(dir) && !fs::exists(dir / "config.json"))
    if (const std::string g = ggufIn(dir); !g.empty()) return openGguf(g);
  if (!fs::is_directory(dir)) {
    if (fs::is_regular_file(dir)) {
      auto ext = dir.extension().string();
      if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt")
        throw InputError(dirArg, "", pickleAdvice(dir.parent_path(), dir.filename().string()));
    }
    throw InputError(dirArg, "", "not a model directory (expected config.json and *.safetensors) or a .gguf file");
  }
  ck->directory_ = fs::absolute(dir).lexically_normal().string();
  ck->configPath_ = (dir / "config.json").string();
  if (!fs::exists(ck->configPath_)) {
    // Say what is there instead: pickle weights get the conversion advice.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const auto ext = fs::path(n).extension().string();
      if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt")
        throw InputError(dirArg, "", pickleAdvice(dir, n) + " (config.json is missing too)");
    }
    if (names.empty())
      throw InputError(dirArg, "",
                       "empty directory: expected a HuggingFace model directory with config.json "
                       "and model.safetensors or model.safetensors.index.json");
    throw InputError(ck->configPath_, "",
                     "missing config.json (expected a HuggingFace model directory as "
                     "save_pretrained writes it)");
  }
  ck->config_ = ModelConfig::load(ck->configPath_);
  ck->config_.mergeGenerationConfig((dir / "generation_config.json").string());

  std::vector<fs::path> weightPaths;
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index)) {
    ck->indexPath_ = index.string();
    const nlohmann::json doc = parseUntrustedJsonFile(index.string());
    if (!doc.contains("weight_map") || !doc["weight_map"].is_object())
      throw InputError(index.string(), "weight_map", "missing or not an object");
    std::map<std::string, size_t> fileIndex;
    for (auto it = doc["weight_map"].begin(); it != doc["weight_map"].end(); ++it) {
      if (!it->is_string())
        throw InputError(index.string(), "weight_map." + it.key(), "expected a file name");
      const auto shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        throw InputError(index.string(), "weight_map." + it.key(), "shard must be a plain file name");
      if (!fileIndex.count(shard)) {
        const fs::path sp = dir / shard;
        if (!fs::exists(sp))
          throw InputError(index.string(), "weight_map." + it.key(),
                           "names shard '" + shard + "' which does not exist");
        fileIndex[shard] = ck->files_.size();
        ck->files_.push_back(SafetensorsFile::open(sp.string()));
      }
      const auto& file = *ck->files_[fileIndex[shard]];
      if (!file.contains(it.key()))
        throw InputError(file.path(), it.key(), "listed in the index but missing from the shard");
      ck->tensorFile_[it.key()] = fileIndex[shard];
    }
  } else if (fs::exists(single)) {
    ck->files_.push_back(SafetensorsFile::open(single.string()));
    for (const auto& n : ck->files_[0]->names()) ck->tensorFile_[n] = 0;
  } else {
    std::vector<std::string> pickles;
    std::vector<std::string> others;
    for (const auto& e : fs::directory_iterator(dir)) {
      auto ext = e.path().extension().string();
      if (ext == ".bin" || ext == ".pt" || ext == ".pth") pickles.push_back(e.path().filename().string());
      if (ext == ".safetensors") others.push_back(e.path().filename().string());
    }
    if (!pickles.empty()) throw InputError(dirArg, "", pickleAdvice(dir, pickles.front()));
    if (others.size() == 1) {
      ck->files_.push_back(SafetensorsFile::open((dir / others[0]).string()));
      for (const auto& n : ck->files_[0]->names()) ck->tensorFile_[n] = 0;
    } else {
      throw InputError(dirArg, "", "no model.safetensors or model.safetensors.index.json found");
    }
  }
  ck->findLanguageModel();
  std::set<std::string> dtypes;
  for (const auto& [name, idx] : ck->tensorFile_) {
    auto dt = ck->entry(name).dtype;
    if (dt == SafetensorsDtype::F32 || dt == SafetensorsDtype::F16 || dt == SafetensorsDtype::BF16)
      dtypes.insert(safetensorsDtypeName(dt));
  }
  ck->storedDtype_ = dtypes.size() == 1 ? *dtypes.begin() : dtypes.empty() ? "none" : "mixed";
  ck->startFingerprint();
  return ck;
}

void Checkpoint::startFingerprint() {
  std::vector<std::string> paths{configPath_};
  for (const auto& f : weightFiles())
    if (f != configPath_) paths.push_back(f);  // a GGUF file is its own config
  std::vector<detail::FileStamp> stamps;
  for (const auto& p : paths) stamps.push_back(detail::stampOf(p));
  if (auto cached = detail::cachedFingerprint(directory_, stamps)) {
    std::promise<std::string> ready;
    ready.set_value(*cached);
    fingerprint_ = ready.get_future().share();
    return;
  }
  auto state = fingerprintState_;
  const std::string dir = directory_;
  fingerprint_ = std::async(std::launch::async, [paths, stamps, state, dir]() -> std::string {
                   struct Cancelled {};
                   try {
                     const std::string fp = detail::computeFingerprint(
                         paths, [&](uint64_t done, uint64_t total) {
                           state->done = done;
                           state->total = total;
                           if (state->cancel) throw Cancelled{};
                         });
                     // Files changed while hashing: the value is not worth caching.
                     std::vector<detail::FileStamp> after;
                     for (const auto& p : paths) after.push_back(detail::stampOf(p));
                     if (after == stamps) detail::storeFingerprint(dir, stamps, fp);
                     return fp;
                   } catch (const Cancelled&) {
                     return {};
                   }
                 }).share();
}

Checkpoint::~Checkpoint() {
  // A hash nobody waited for stops at its next progress report (within 256 MB).
  fingerprintState_->cancel = true;
}

const std::string& Checkpoint::fingerprint() const { return fingerprint_.get(); }

bool Checkpoint::fingerprintReady() const {
  return fingerprint_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::pair<uint64_t, uint64_t> Checkpoint::fingerprintProgress() const {
  return {fingerprintState_->done.load(), fingerprintState_->total.load()};
}

std::vector<std::string> Checkpoint::weightFiles() const {
  if (gguf_) return {gguf_->file().path()};
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> Checkpoint::tensorNames() const {
  std::vector<std::string> out;
  if (gguf_)
    for (const auto& [n, w] : gguf_->weights()) out.push_back(n);
  for (const auto& [n, i] : tensorFile_) out.push_back(n);
  return out;
}

bool Checkpoint::contains(const std::string& name) const {
  return gguf_ ? gguf_->weights().count(name) > 0 : tensorFile_.count(name) > 0;
}

StoredWeight Checkpoint::stored(const std::string& name) const {
  StoredWeight w;
  if (gguf_) {
    const auto it = gguf_->weights().find(name);
    if (it == gguf_->weights().end())
      throw InputError(gguf_->file().path(), name,
                       "missing tensor (needed by " + architectureName(config_.architecture) + ")");
    const GgufTensorInfo& t = *it->second.tensor;
    w.file = gguf_->file().path();
    w.storedName = t.name;
    w.dtype = detail::ggmlTypeName(t.type);
    w.shape = it->second.shape;
    w.bytes = gguf_->file().bytes(t);  // InputError for a type KV Scope does not read
    w.size = t.size;
    const detail::GgmlType* g = detail::ggmlType(t.type);
    w.blockElements = g->blockElements;
    w.blockBytes = g->blockBytes;
    w.permutedHeads = it->second.permutedHeads;
    return w;
  }
  const SafetensorsFile& file = fileFor(name);
  const SafetensorsEntry& e = entry(name);
  w.file = file.path();
  w.storedName = e.name;
  w.dtype = safetensorsDtypeName(e.dtype);
  w.shape = e.shape;
  w.bytes = file.bytes(e);
  w.size = e.end - e.begin;
  return w;
}

uint64_t Checkpoint::weightBytes() const {
  uint64_t n = 0;
  if (gguf_)
    for (const auto& [name, w] : gguf_->weights()) n += w.tensor->size;
  for (const auto& [name, i] : tensorFile_) {
    const SafetensorsEntry& e = entry(name);
    n += e.end - e.begin;
  }
  return n;
}

uint64_t Checkpoint::largestTensorBytes() const {
  uint64_t n = 0;
  if (gguf_)
    for (const auto& [name, w] : gguf_->weights()) n = std::max<uint64_t>(n, w.tensor->size);
  for (const auto& [name, i] : tensorFile_) {
    const SafetensorsEntry& e = entry(name);
    n = std::max<uint64_t>(n, e.end - e.begin);
  }
  return n;
}

const SafetensorsFile& Checkpoint::fileFor(const std::string& name) const {
  if (gguf_) throw UsageError("'" + gguf_->file().path() + "' is a GGUF file, not safetensors (use stored())");
  auto it = tensorFile_.find(name);
  if (it == tensorFile_.end())
    throw InputError(indexPath_.empty() && !files_.empty() ? files_[0]->path() : indexPath_, name,
                     "missing tensor (needed by " + architectureName(config_.architecture) + ")");
  return *files_[it->second];
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const {
  const auto stored = storedName_.find(name);
  return fileFor(name).entry(stored == storedName_.end() ? name : stored->second);
}

void Checkpoint::findLanguageModel() {
  // A multimodal checkpoint (Gemma 3's, Mistral 3's) stores its language model under a
  // prefix: language_model.model.* and language_model.lm_head (the layout transformers 4 and
  // 5 save, the llava convention), or model.language_model.* (transformers 5's module names).
  // The tensors under it are known by the text model's own names; the others (the vision
  // tower, the projector) are not read.
  const std::string embed = familyOf(config_.architecture).weightNames().embed;
  if (embed.empty() || tensorFile_.count(embed)) return;
  struct Layout { std::string storedPrefix, visiblePrefix; };
  for (const Layout& l : {Layout{"language_model.", ""}, Layout{"model.language_model.", "model."}}) {
    if (embed.rfind(l.visiblePrefix, 0) != 0 ||
        !tensorFile_.count(l.storedPrefix + embed.substr(l.visiblePrefix.size())))
      continue;
    std::map<std::string, size_t> visible;
    for (const auto& [name, idx] : tensorFile_) {
      if (name.rfind(l.storedPrefix, 0) != 0) continue;
      const std::string v = l.visiblePrefix + name.substr(l.storedPrefix.size());
      visible[v] = idx;
      storedName_[v] = name;
    }
    if (l.visiblePrefix == "model.")  // the head stays at the top level in this layout
      for (const auto& [name, idx] : tensorFile_)
        if (name.rfind("lm_head.", 0) == 0) visible[name] = idx;
    tensorFile_ = std::move(visible);
    return;
  }
}

}  // namespace kvscope
