#include "tokenizer/BpeModel.hpp"

#include <cstdio>
#include <queue>

#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

namespace {
uint64_t pairKey(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string byteToken(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(b));
  return buf;
}

struct Symbol {
  int64_t id;
  long prev;
  long next;
  std::size_t len;  // bytes of the word covered; 0 once merged away
};

struct Candidate {
  uint32_t rank;
  std::size_t pos;
  int64_t newId;
};

// Lowest rank first, then leftmost position (the order `tokenizers`' Word::merge_all uses).
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};
}  // namespace

BpeModel::BpeModel(BpeConfig config, const MergeError& onBadMerge) : config_(std::move(config)) {
  vocabR_.reserve(config_.vocab.size());
  for (const auto& [token, id] : config_.vocab) {
    vocabR_[id] = token;
    if (id > maxId_) maxId_ = id;
  }
  if (config_.unkToken) {
    auto it = config_.vocab.find(*config_.unkToken);
    if (it != config_.vocab.end()) unkId_ = it->second;
  }
  const std::size_t prefixLen =
      config_.continuingSubwordPrefix ? config_.continuingSubwordPrefix->size() : 0;
  merges_.reserve(config_.merges.size());
  std::string merged;  // reused: one allocation for all merges
  for (std::size_t i = 0; i < config_.merges.size(); ++i) {
    const auto& [a, b] = config_.merges[i];
    auto ia = config_.vocab.find(a);
    if (ia == config_.vocab.end()) onBadMerge(i, "merge token '" + a + "' is not in the vocabulary");
    auto ib = config_.vocab.find(b);
    if (ib == config_.vocab.end()) onBadMerge(i, "merge token '" + b + "' is not in the vocabulary");
    // As in `tokenizers`: the right part loses the continuing-subword prefix when joined.
    merged.assign(a);
    if (b.size() >= prefixLen) merged.append(b, prefixLen, std::string::npos);
    auto im = config_.vocab.find(merged);
    if (im == config_.vocab.end()) {
      onBadMerge(i, "merged token '" + merged + "' is not in the vocabulary");
    }
    merges_[pairKey(ia->second, ib->second)] = {static_cast<uint32_t>(i), im->second};
  }
  config_.merges.clear();
  config_.merges.shrink_to_fit();
}

std::optional<int64_t> BpeModel::tokenToId(const std::string& token) const {
  auto it = config_.vocab.find(token);
  if (it == config_.vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeModel::idToToken(int64_t id) const {
  auto it = vocabR_.find(id);
  if (it == vocabR_.end()) return std::nullopt;
  return it->second;
}

std::vector<int64_t> BpeModel::tokenize(const std::string& word) const {
  if (word.empty()) return {};
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) return it->second;
  }
  std::vector<int64_t> ids;
  auto whole = config_.ignoreMerges ? config_.vocab.find(word) : config_.vocab.end();
  if (whole != config_.vocab.end()) {
    ids.push_back(whole->second);
  } else {
    ids = mergeWord(word);
  }
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(word, ids);
  return ids;
}

std::vector<int64_t> BpeModel::mergeWord(const std::string& word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int64_t id, std::size_t len) {
    const long idx = static_cast<long>(symbols.size());
    symbols.push_back({id, idx - 1, -1, len});
    if (idx > 0) symbols[idx - 1].next = idx;
  };

  // A pending unknown run, fused or not, is flushed when a known character follows.
  bool hasUnk = false;
  int64_t unkTok = 0;
  std::size_t unkLen = 0;
  const auto chars = splitChars(word);
  for (std::size_t c = 0; c < chars.size(); ++c) {
    std::string s(chars[c]);
    const std::size_t byteLen = s.size();
    if (c > 0 && config_.continuingSubwordPrefix) s = *config_.continuingSubwordPrefix + s;
    if (c + 1 == chars.size() && config_.endOfWordSuffix) s += *config_.endOfWordSuffix;

    auto it = config_.vocab.find(s);
    if (it != config_.vocab.end()) {
      if (hasUnk) {
        add(unkTok, unkLen);
        hasUnk = false;
      }
      add(it->second, byteLen);
      continue;
    }
    if (config_.byteFallback) {
      std::vector<int64_t> bytes;
      bool all = true;
      for (char ch : s) {
        auto bt = config_.vocab.find(byteToken(static_cast<unsigned char>(ch)));
        if (bt == config_.vocab.end()) {
          all = false;
          break;
        }
        bytes.push_back(bt->second);
      }
      if (all) {
        for (int64_t id : bytes) add(id, 1);
        continue;
      }
    }
    if (unkId_) {
      if (hasUnk && config_.fuseUnk) {
        unkLen += byteLen;
      } else {
        if (hasUnk) add(unkTok, unkLen);
        hasUnk = true;
        unkTok = *unkId_;
        unkLen = byteLen;
      }
    }
    // Without an unk token the character is dropped, as `tokenizers` does.
  }
  if (hasUnk) add(unkTok, unkLen);

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto lookup = [this](int64_t a, int64_t b) -> const std::pair<uint32_t, int64_t>* {
    auto it = merges_.find(pairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* m = lookup(symbols[i].id, symbols[i + 1].id)) queue.push({m->first, i, m->second});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const std::size_t nextPos = static_cast<std::size_t>(left.next);
    const Symbol right = symbols[nextPos];
    const auto* m = lookup(left.id, right.id);
    if (m == nullptr || m->second != top.newId) continue;  // stale entry

    left.id = top.newId;
    left.len += right.len;
    left.next = right.next;
    symbols[nextPos].len = 0;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<long>(top.pos);

    if (left.prev >= 0) {
      const std::size_t prevPos = static_cast<std::size_t>(left.prev);
      if (const auto* pm = lookup(symbols[prevPos].id, left.id)) queue.push({pm->first, prevPos, pm->second});
    }
    if (left.next >= 0) {
      if (const auto* nm = lookup(left.id, symbols[static_cast<std::size_t>(left.next)].id)) {
        queue.push({nm->first, top.pos, nm->second});
      }
    }
  }

  std::vector<int64_t> ids;
  ids.reserve(symbols.size());
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
  return ids;
}

}  // namespace kvscope::tok
