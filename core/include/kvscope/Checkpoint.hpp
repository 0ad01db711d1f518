// A HuggingFace checkpoint directory: config.json (+ generation_config.json) and weights in
// model.safetensors or shards listed by model.safetensors.index.json. Files are
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

class Checkpoint {
 public:
  /// Opens `dir`. Throws InputError naming the file and field for a missing config,
  /// a pickle-only checkpoint, a malformed index, or a shard that is missing.
  static std::shared_ptr<const Checkpoint> open(const std::string& dir);

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

  bool contains(const std::string& name) const { return tensorFile_.count(name) > 0; }
  std::vector<std::string> tensorNames() const;
  /// Throws InputError(weight file or index, name, "missing tensor").
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
