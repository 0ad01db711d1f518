// The HuggingFace `tokenizers` BPE model: vocabulary + ranked merges applied to one
// pre-tokenized word at a time, with byte fallback, unk fusing, continuing-subword prefix,
// end-of-word suffix and ignore_merges. Results are cached per word.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvscope::tok {

struct BpeConfig {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> unkToken;
  std::optional<std::string> continuingSubwordPrefix;
  std::optional<std::string> endOfWordSuffix;
  bool fuseUnk = false;
  bool byteFallback = false;
  bool ignoreMerges = false;
};

class BpeModel {
 public:
  /// Reports a bad merge: field (e.g. "model.merges[3]" or "line 5") and detail. Must throw.
  using MergeError = std::function<void(std::size_t mergeIndex, const std::string& detail)>;

  BpeModel(BpeConfig config, const MergeError& onBadMerge);

  /// Token ids for one word (no whitespace handling here: the pre-tokenizer did that).
  std::vector<int64_t> tokenize(const std::string& word) const;

  std::optional<int64_t> tokenToId(const std::string& token) const;
  std::optional<std::string> idToToken(int64_t id) const;
  int64_t maxId() const { return maxId_; }
  bool byteFallback() const { return config_.byteFallback; }
  std::size_t mergeCount() const { return merges_.size(); }

 private:
  std::vector<int64_t> mergeWord(const std::string& word) const;

  BpeConfig config_;
  std::unordered_map<int64_t, std::string> vocabR_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, int64_t>> merges_;
  std::optional<int64_t> unkId_;
  int64_t maxId_ = -1;

  static constexpr std::size_t kCacheCapacity = 10000;
  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace kvscope::tok
