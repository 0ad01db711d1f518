#include "trace/LlamaSeqState.hpp"

#include <cstring>

#include "gguf/GgmlBlocks.hpp"
#include "kvscope/Error.hpp"
#include "util/MappedFile.hpp"

namespace kvscope::detail {

namespace {

constexpr uint32_t kFileMagic = 0x67677371u;  // 'ggsq' (LLAMA_FILE_MAGIC_GGSQ)
constexpr uint32_t kBlobMagic = 0xaf143cd8u;  // llama_context's io_magic of get_data blobs
constexpr uint32_t kMaxSequences = 256;       // LLAMA_MAX_SEQ
constexpr uint32_t kMaxLayers = 4096;

// A bounded little-endian cursor: every read checks the bytes left.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, const std::string& source) : p_(p), n_(n), source_(source) {}
  size_t left() const { return n_ - at_; }
  size_t at() const { return at_; }
  void need(size_t bytes, const std::string& field) const {
    if (bytes > left())
      throw InputError(source_, field, "needs " + std::to_string(bytes) + " bytes at offset " +
                                           std::to_string(at_) + ", the file has " +
                                           std::to_string(left()) + " left (truncated?)");
  }
  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  const uint8_t* take(size_t bytes, const std::string& field) {
    need(bytes, field);
    const uint8_t* q = p_ + at_;
    at_ += bytes;
    return q;
  }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(source_, field, what);
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
  const std::string& source_;
};

const GgmlType& cacheType(Cursor& c, int32_t id, const std::string& field) {
  const GgmlType* t = id >= 0 ? ggmlType(static_cast<uint32_t>(id)) : nullptr;
  if (!t)
    c.fail(field, ggmlTypeName(static_cast<uint32_t>(id)) +
                      " is not a cache type KV Scope reads (it reads " + ggmlReadableTypes() + ")");
  return *t;
}

// `cells` rows of `rowBytes` in type `t`, dequantised.
LlamaStateRows readRows(Cursor& c, const GgmlType& t, uint64_t rowBytes, int64_t cells,
                        const std::string& field) {
  if (rowBytes == 0 || rowBytes % static_cast<uint64_t>(t.blockBytes) != 0)
    c.fail(field, std::to_string(rowBytes) + " bytes per row is not a whole number of " +
                      t.name + " blocks (" + std::to_string(t.blockBytes) + " bytes)");
  if (rowBytes > c.left() / static_cast<uint64_t>(cells))
    c.fail(field, std::to_string(cells) + " rows of " + std::to_string(rowBytes) + " bytes do not fit in the " +
                      std::to_string(c.left()) + " bytes left (truncated?)");
  LlamaStateRows r;
  r.type = t.id;
  r.width = static_cast<int64_t>(rowBytes) / t.blockBytes * t.blockElements;
  r.rows.resize(static_cast<size_t>(cells * r.width));
  const uint8_t* src = c.take(static_cast<size_t>(rowBytes) * static_cast<size_t>(cells), field);
  for (int64_t i = 0; i < cells; ++i)
    ggmlDequantize(t, src + static_cast<size_t>(i) * rowBytes, r.width,
                   r.rows.data() + static_cast<size_t>(i * r.width));
  return r;
}

// One stream's cells and layers (state_write_meta + state_write_data).
// `at` prefixes the fields ("swa " in an iswa state's second cache).
void readStream(Cursor& c, uint32_t cellCount, LlamaCacheSection& s, const std::string& at) {
  // each cell's meta is at least 8 bytes: refuse a count the file cannot hold
  if (cellCount > c.left() / 8) c.fail(at + "cell_count", std::to_string(cellCount) + " cells do not fit in the " + std::to_string(c.left()) + " bytes left");
  for (uint32_t i = 0; i < cellCount; ++i) {
    const std::string cell = at + "cells[" + std::to_string(i) + "]";
    s.positions.push_back(c.read<int32_t>(cell + ".pos"));
    const auto n = c.read<uint32_t>(cell + ".n_seq_id");
    if (n > kMaxSequences)
      c.fail(cell + ".n_seq_id", std::to_string(n) + " sequences (llama.cpp has at most 256); "
                                 "a cell extension (M-RoPE, per-layer embeddings) or another layout");
    std::vector<int32_t> ids;
    for (uint32_t k = 0; k < n; ++k) {
      const auto id = c.read<int32_t>(cell + ".seq_id");
      if (id < 0 || static_cast<uint32_t>(id) >= kMaxSequences)
        c.fail(cell + ".seq_id", "sequence id " + std::to_string(id) + " outside 0..255");
      ids.push_back(id);
    }
    s.cellSeqIds.push_back(std::move(ids));
  }
  const auto vTrans = c.read<uint32_t>(at + "v_trans");
  if (vTrans > 1) c.fail(at + "v_trans", "must be 0 or 1, not " + std::to_string(vTrans));
  s.valuesTransposed = vTrans == 1;
  const auto layers = c.read<uint32_t>(at + "n_layer");
  if (layers == 0 || layers > kMaxLayers || layers > c.left() / 12)
    c.fail(at + "n_layer", std::to_string(layers) + " layers (1 to 4096 that fit in the file)");
  const int64_t cells = cellCount;
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string f = at + "layer " + std::to_string(l) + " ";
    const GgmlType& t = cacheType(c, c.read<int32_t>(f + "k_type"), f + "k_type");
    const auto rowBytes = c.read<uint64_t>(f + "k_row_bytes");
    s.keys.push_back(readRows(c, t, rowBytes, cells, f + "k rows"));
  }
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string f = at + "layer " + std::to_string(l) + " ";
    const GgmlType& t = cacheType(c, c.read<int32_t>(f + "v_type"), f + "v_type");
    if (!s.valuesTransposed) {
      const auto rowBytes = c.read<uint64_t>(f + "v_row_bytes");
      s.values.push_back(readRows(c, t, rowBytes, cells, f + "v rows"));
      continue;
    }
    // transposed: each of the n_embd value components for every cell in turn
    const auto elementBytes = c.read<uint32_t>(f + "v_element_bytes");
    if (t.blockElements != 1 || elementBytes != static_cast<uint32_t>(t.blockBytes))
      c.fail(f + "v_element_bytes", std::to_string(elementBytes) + " bytes per element of a transposed " +
                                        t.name + " cache (expected a float type's size)");
    const auto width = c.read<uint32_t>(f + "n_embd_v");
    if (width == 0 || width > c.left() / elementBytes / cellCount)
      c.fail(f + "n_embd_v", std::to_string(width) + " value components do not fit in the file");
    const uint8_t* src = c.take(static_cast<size_t>(width) * cellCount * elementBytes, f + "v columns");
    LlamaStateRows r;
    r.type = t.id;
    r.width = width;
    r.rows.resize(static_cast<size_t>(cells) * width);
    std::vector<float> column(cellCount);
    for (uint32_t j = 0; j < width; ++j) {
      ggmlDequantize(t, src + static_cast<size_t>(j) * cellCount * elementBytes, cells, column.data());
      for (int64_t i = 0; i < cells; ++i) r.rows[static_cast<size_t>(i) * width + j] = column[static_cast<size_t>(i)];
    }
    s.values.push_back(std::move(r));
  }
}

// One attention cache from the cursor on: with the stream count (`streams`) or without it.
void readCache(Cursor& c, bool streams, LlamaCacheSection& s, const std::string& at) {
  s.streams = streams ? c.read<uint32_t>(at + "n_stream") : 0;
  if (streams && (s.streams == 0 || s.streams > kMaxSequences))
    c.fail(at + "n_stream", std::to_string(s.streams) + " streams (1 to 256)");
  const uint32_t count = streams ? s.streams : 1;
  bool filled = false;
  for (uint32_t k = 0; k < count; ++k) {
    const auto cellCount = c.read<uint32_t>(at + "cell_count");
    if (cellCount == 0) continue;
    if (filled)
      c.fail(at + "cell_count", "a second stream holds cells too; KV Scope reads the state of one sequence");
    readStream(c, cellCount, s, at);
    filled = true;
  }
}

// The memory from the cursor on: one attention cache, or an iswa cache's two.
void readMemory(Cursor& c, bool streams, LlamaSeqState& s) {
  readCache(c, streams, s, "");
  if (c.left() == 0) return;
  const size_t left = c.left();
  LlamaCacheSection second;
  try {
    readCache(c, streams, second, "swa ");
  } catch (const InputError& e) {
    c.fail(e.field(), e.detail() + ": the " + std::to_string(left) +
                          " bytes after the first cache do not read as a second attention cache (an iswa "
                          "state's SWA layers); a damaged file, or a hybrid model's recurrent cache, which "
                          "KV Scope does not read from llama.cpp yet");
  }
  if (c.left() != 0)
    c.fail("memory", std::to_string(c.left()) +
                         " bytes follow the second cache: llama.cpp's iswa memory holds two caches");
  s.second = std::move(second);
}

}  // namespace

bool looksLikeLlamaSeqState(const uint8_t* bytes, size_t size) {
  if (size < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, bytes, 4);
  return magic == kFileMagic || magic == kBlobMagic;
}

LlamaSeqState parseLlamaSeqState(const uint8_t* bytes, size_t size, const std::string& source) {
  Cursor c(bytes, size, source);
  LlamaSeqState s;
  s.source = source;
  const auto magic = c.read<uint32_t>("magic");
  if (magic == kBlobMagic) {
    s.seqId = c.read<int32_t>("seq_id");
  } else if (magic == kFileMagic) {
    s.version = c.read<uint32_t>("version");
    if (s.version != 2 && s.version != 3)
      c.fail("version", "sequence state format version " + std::to_string(s.version) +
                            "; KV Scope reads versions 2 and 3");
    const auto n = c.read<uint32_t>("n_token_count");
    if (n > c.left() / 4) c.fail("n_token_count", std::to_string(n) + " tokens do not fit in the file");
    s.hasTokens = true;
    s.tokens.resize(n);
    if (n) std::memcpy(s.tokens.data(), c.take(static_cast<size_t>(n) * 4, "tokens"), static_cast<size_t>(n) * 4);
  } else {
    c.fail("magic", "not a llama.cpp sequence state ('ggsq' file or llama_state_seq_get_data bytes)");
  }
  const size_t memoryAt = c.at();
  const LlamaSeqState header = s;
  try {
    readMemory(c, true, s);
    return s;
  } catch (const InputError& streamLayout) {
    // Version 2 files written before llama.cpp's multi-stream caches have no stream count.
    if (s.version != 2) throw;
    LlamaSeqState old = header;
    Cursor again(bytes, size, source);
    again.take(memoryAt, "header");
    try {
      readMemory(again, false, old);
      return old;
    } catch (const InputError&) {
      throw streamLayout;  // neither layout: the current one's complaint
    }
  }
}

LlamaSeqState readLlamaSeqStateFile(const std::string& path) {
  size_t size = 0;
  const uint8_t* bytes = mapWholeFile(path, 8, "magic", "a llama.cpp state starts with 8 bytes of header", size);
  struct Unmap {
    const uint8_t* p;
    size_t n;
    ~Unmap() { unmapFile(p, n); }
  } unmap{bytes, size};
  return parseLlamaSeqState(bytes, size, path);
}

}  // namespace kvscope::detail
