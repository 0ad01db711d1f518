// Writes a deterministic random-weight checkpoint in exactly the layout HuggingFace
// `save_pretrained` produces: config.json, generation_config.json, model.safetensors (or
// model-0000i-of-0000N.safetensors shards and model.safetensors.index.json), tokenizer.json
// and tokenizer_config.json. The same spec and seed give byte-identical files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/FloatTensor.hpp"

namespace kvscope {

class CheckpointWriter {
 public:
  /// How a tensor is initialised (before conversion to the stored dtype).
  enum class Init {
    Normal,      // N(0, std): matrices and embeddings
    NormWeight,  // 1 + small noise
    Bias         // small noise around 0
  };
  /// Biases are drawn N(0, kBiasFraction * init std).
  static constexpr double kBiasFraction = 0.1;
  struct TensorPlan {
    std::string name;  // transformers' state-dict name
    std::vector<int64_t> shape;
    Init init = Init::Normal;
    double std = 0.0;  // for Normal and Bias
    int64_t numel() const;
  };
  struct WrittenFile {
    std::string path;  // absolute
    uint64_t bytes = 0;
  };

  /// Validates the spec (UsageError naming the field on inconsistency).
  explicit CheckpointWriter(CheckpointSpec spec);

  const CheckpointSpec& spec() const { return spec_; }
  /// Tensors in the order the transformers model's state_dict lists them (which is the
  /// order save_pretrained fills shards in).
  const std::vector<TensorPlan>& tensors() const { return plan_; }
  int64_t parameterCount() const;
  /// Bytes of weight data in the stored dtype (the index's metadata.total_size).
  uint64_t weightBytes() const;
  /// File names (relative to the directory) write() produces, the manifest included.
  std::vector<std::string> fileNames() const;
  /// "model.safetensors" or "model-00002-of-00003.safetensors" for shard 1 of 3.
  std::string shardFileName(int64_t shard) const;
  /// Which shard (0-based) each tensor of tensors() goes to.
  std::vector<int64_t> shardAssignment() const;
  /// One tensor's float32 values (the stored file holds them rounded to the dtype).
  FloatTensor makeTensor(const TensorPlan& t) const;

  /// The hidden file listing what make-demo wrote, so a later --force run replaces only
  /// its own files.
  static const char* manifestName() { return ".kvscope-make-demo.json"; }

  /// Writes into `dir` (created when missing). A directory that is not empty is refused
  /// unless `force`; with `force`, files this writer produces are replaced, files an
  /// earlier run listed in its manifest and no longer produced are removed, and every
  /// other file is left alone. A foreign weight file that would be loaded with or instead
  /// of the new weights (model*.safetensors*, *.bin, ...) is refused before anything is
  /// written. Throws InputError naming the directory or file.
  std::vector<WrittenFile> write(const std::string& dir, bool force = false) const;

 private:
  CheckpointSpec spec_;
  std::vector<TensorPlan> plan_;
};

}  // namespace kvscope
