// An MLX-LM prompt cache as a trace: what `mlx_lm.cache_prompt`, `save_prompt_cache` and
// mlx-lm's server keep of a prompt. The file is safetensors (mlx-lm's models/cache.py): per
// layer i the tensors of its cache's `state` ("i.0" keys and "i.1" values [B, h_kv, S, d],
// then scalars such as "i.2" offset), and the metadata: the user's dict under "0.<key>", each
// layer's cache class under "1.<i>" (KVCache, RotatingKVCache, ...), and which tensors are
// scalars under "2.<n>". A KVCache holds its rows in position order, the first `offset` of a
// buffer that grows in steps; a RotatingKVCache (a sliding window of max_size rows, the first
// `keep` never evicted) does the same until its ring wraps (offset > max_size), after which
// its slots hold the last rows out of order (not read yet: refused by name). DeepSeek's latent
// attention (V2, V3): a KVCache of latent rows [B, 1, S, kv_lora_rank] and roped key parts
// [B, 1, S, qk_rope_head_dim], as transformers 5 caches them, read as latent layers (mlx-lm turns
// the roped pairs in place, so V3's, rope_interleave: evens then odds, are reordered), or each
// head's decompressed key [B, heads, S, nope + rope] and value (mlx-lm's V2; the trace says
// model.latent_records "heads").
//
// The file names no tokens: they come from its metadata "tokens" ("1,2,3", what
// kvscope-record --engine mlx --save-state writes) or from the caller (the audit's
// --ids / --prompt: the text the cache was made from). The trace is one request with
// one step feeding those tokens at positions 0..offset-1, whose records are the rows; no
// logits. Refused, naming the file and the field: another cache class (QuantizedKVCache,
// ArraysCache, ...), a batch other than 1, shapes or offsets that differ from the model or
// between layers, a token count other than the offset.
#pragma once

#include <string>
#include <vector>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

/// Whether `path` is a safetensors file whose metadata names mlx-lm cache classes.
bool isMlxPromptCacheFile(const std::string& path);

/// The cache as a one-step trace of `checkpoint`'s model; `tokens` (when the file's metadata
/// has none) are the ids the cache holds.
Trace readMlxPromptCacheTrace(const std::string& path, const Checkpoint& checkpoint,
                              const std::vector<int64_t>& tokens = {});

}  // namespace kvscope
