// llama.cpp's saved sequence state, parsed (src/llama-context.cpp state_seq_save_file,
// src/llama-kv-cache.cpp state_write): what one sequence's KV cache held when it was saved.
//
//   file (llama_state_seq_save_file, the server's /slots/{id}?action=save):
//     u32 magic 'ggsq' | u32 version (2, 3) | u32 n_token | i32 tokens[n_token] | memory
//   blob (llama_state_seq_get_data, newer llama.cpp): u32 0xaf143cd8 | i32 seq_id | memory
//   memory (one attention cache):
//     u32 n_stream (absent in the version 2 files of llama.cpp before multi-stream caches)
//     per stream: u32 cell_count, and when > 0:
//       per cell: i32 pos | u32 n_seq_id | i32 seq_id[n_seq_id]
//       u32 v_trans | u32 n_layer
//       per layer: i32 k_type | u64 k_row_bytes | k rows [cell_count][k_row_bytes]
//       v_trans 0, per layer: i32 v_type | u64 v_row_bytes | v rows [cell_count][v_row_bytes]
//       v_trans 1, per layer: i32 v_type | u32 v_element_bytes | u32 n_embd_v |
//                             [n_embd_v][cell_count] elements
//   A row is ggml's: n_embd = n_kv_heads x head_dim values, head after head, in the cache's
//   type (F32, F16, BF16, Q8_0, Q4_0, ...), dequantised here as ggml does.
//   A model with sliding-window layers (Gemma 2 and 3, ...) runs an iswa cache
//   (src/llama-kv-cache-iswa.cpp): its memory is two such caches, the non-SWA layers' then
//   the SWA layers', each with its own cells; the SWA one leaves out the cells its window
//   masks for the sequence (pos_max - pos >= n_swa). Saved with
//   LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (llama-server's context checkpoints) only the second.
// Untrusted input: every count is checked against the bytes left before anything is sized by
// it; errors name the file and the field. Models whose cells carry llama.cpp's extension
// (M-RoPE's 2-D positions, per-layer-embedding token ids) and memory that is not one or two
// attention caches (a hybrid model's recurrent cache) are refused by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct LlamaStateRows {
  uint32_t type = 0;        // ggml_type of the cache tensor
  int64_t width = 0;        // values per row: n_kv_heads x head_dim
  std::vector<float> rows;  // [cells, width], dequantised
};

/// One attention cache's part of the state: its cells and its layers' rows.
struct LlamaCacheSection {
  uint32_t streams = 0;             // the cache's streams (0: a layout without them)
  std::vector<int32_t> positions;   // per cell, in the cache's physical order
  std::vector<std::vector<int32_t>> cellSeqIds;
  bool valuesTransposed = false;
  std::vector<LlamaStateRows> keys, values;  // per layer of this cache
  int64_t cells() const { return static_cast<int64_t>(positions.size()); }
};

/// The state: its header and its first cache (the only one, or an iswa cache's non-SWA part),
/// then `second`, an iswa cache's SWA part, when the memory holds two caches.
struct LlamaSeqState : LlamaCacheSection {
  std::string source;               // the file, for messages
  uint32_t version = 0;             // the file's format version; 0 for a get_data blob
  bool hasTokens = false;           // a file lists the tokens it was saved with
  std::vector<int32_t> tokens;
  int32_t seqId = -1;               // a blob's sequence id (-1: a file, not recorded)
  std::optional<LlamaCacheSection> second;
};

/// True when `bytes` start as a llama.cpp sequence state file ('ggsq', any version) or a
/// get_data blob (its io magic).
bool looksLikeLlamaSeqState(const uint8_t* bytes, size_t size);

/// Parses a whole file or blob. Throws InputError(source, field, what).
LlamaSeqState parseLlamaSeqState(const uint8_t* bytes, size_t size, const std::string& source);

/// Reads and parses `path`.
LlamaSeqState readLlamaSeqStateFile(const std::string& path);

/// readLlamaStateTrace (kvscope/LlamaStateTrace.hpp) on a parsed state, for a checkpoint of
/// `config` whose weights are stored as `storedDtype` ("F16", "Q8_0", "mixed (...)"), a GGUF
/// file or not; `tokens` the caller's (--ids / --prompt), which must be the file's.
Trace traceFromLlamaState(const LlamaSeqState& state, const ModelConfig& config,
                          const std::string& storedDtype, bool gguf, const std::vector<int64_t>& tokens = {});

}  // namespace kvscope::detail
