// A HuggingFace checkpoint directory: config.json (+ generation_config.json) and weights in
// model.safetensors or shards listed by model.safetensors.index.json; or a GGUF file
// (llama.cpp's format: the file, or a directory holding one and no config.json), read as
// the HuggingFace checkpoint it was converted from (gguf/GgufModelView.hpp). Files are
// memory-mapped, never copied. PyTorch pickle checkpoints are refused (loading them runs
// arbitrary code).
#pragma once

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/SafetensorsFile.hpp"

namespace kvscope {

class GgufFile;
namespace detail {
class GgufModelView;
}

/// How one weight is stored, in either format: where its bytes are and how to read them.
struct StoredWeight {
  std::string file;        // the file that holds it (errors name it)
  std::string storedName;  // its name in that file
  std::string dtype;       // F64, F32, F16, BF16, U8, ... or a GGUF ggml type (Q8_0, Q4_K, ...)
  std::vector<int64_t> shape;  // as the model knows it (HuggingFace order, [out, in])
  const uint8_t* bytes = nullptr;  // inside the mapping, valid while the checkpoint lives
  uint64_t size = 0;
  int64_t blockElements = 1;  // a block-quantised ggml type: values and bytes per block
  int64_t blockBytes = 0;
  int64_t permutedHeads = 0;  // GGUF: q/k rows llama.cpp's converter permuted per head (0: none)
  bool blockQuantized() const { return blockElements > 1; }
};

class Checkpoint {
 public:
  /// Opens `dir`. Throws InputError naming the file and field for a missing config,
  /// a pickle-only checkpoint, a malformed index, or a shard that is missing.
  static std::shared_ptr<const Checkpoint> open(const std::string& dir);

  /// The directory it was opened from, or the GGUF file (either reopens it).
  const std::string& directory() const { return directory_; }
  const ModelConfig& config() const { return config_; }
  /// SHA-256 (hex) over config.json and every weight file's bytes, in name order (each
  /// preceded by its file name; tools/kvtrace.py fingerprint gives the same). Read from
  /// the user's fingerprint cache when no file changed (path, size, mtime, inode);
  /// otherwise open() starts hashing on a background thread, so the hash runs while the
  /// model loads, and this waits for it (then caches it). Throws InputError when a file
  /// cannot be read.
  const std::string& fingerprint() const;
  /// True when fingerprint() will not wait (cached, or the hash has finished).
  bool fingerprintReady() const;
  /// Bytes the background hash has read so far, and its total (0/0 when cached).
  std::pair<uint64_t, uint64_t> fingerprintProgress() const;

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  ~Checkpoint();
  /// The float dtype the weights are stored in: "F32", "F16", "BF16" or "mixed".
  const std::string& storedDtype() const { return storedDtype_; }
  std::vector<std::string> weightFiles() const;  // absolute paths

  bool contains(const std::string& name) const;
  std::vector<std::string> tensorNames() const;
  /// Throws InputError(weight file or index, name, "missing tensor").
  StoredWeight stored(const std::string& name) const;
  /// The bytes of every tensor the checkpoint holds.
  uint64_t weightBytes() const;
  /// Bytes of the largest weight tensor (what one matmul must have resident at once).
  uint64_t largestTensorBytes() const;
  /// A GGUF file (no safetensors: fileFor and entry throw UsageError).
  bool isGguf() const { return gguf_ != nullptr; }
  /// Safetensors checkpoints: the file that holds `name`, and its entry there.
  const SafetensorsFile& fileFor(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;

 private:
  std::string directory_;
  std::string configPath_;
  ModelConfig config_;
  std::string storedDtype_;
  std::string indexPath_;  // empty for a single-file checkpoint
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, size_t> tensorFile_;  // tensor name -> index into files_
  // A language model stored under a prefix (findLanguageModel): the name the model knows a
  // tensor by -> the name the file stores it under.
  std::map<std::string, std::string> storedName_;
  void findLanguageModel();
  std::shared_ptr<const detail::GgufModelView> gguf_;
  static std::shared_ptr<const Checkpoint> openGguf(const std::string& path);
  struct FingerprintState {
    std::atomic<bool> cancel{false};
    std::atomic<uint64_t> done{0}, total{0};
  };
  std::shared_ptr<FingerprintState> fingerprintState_ = std::make_shared<FingerprintState>();
  std::shared_future<std::string> fingerprint_;  // ready at once on a cache hit

  Checkpoint() = default;
  void startFingerprint();
};

}  // namespace kvscope
