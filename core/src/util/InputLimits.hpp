// The limits every parser of untrusted input applies before it trusts a size: what a
// refusal names (file, field, limit) and docs/limits.md lists. Each is far above any
// published model or real trace and far below what would overflow an int64 product or
// exhaust memory before the file itself is checked.
#pragma once

#include <cstdint>

namespace kvscope::limits {

/// Nesting depth of any JSON document KV Scope reads (tokenizer.json, config.json,
/// generation_config.json, tokenizer_config.json, safetensors headers, trace documents).
/// HuggingFace's own reader (serde_json) stops at 128 as well.
constexpr int kJsonDepth = 128;

/// Sequence normalizers, pre-tokenizers, post-processors and decoders inside one another
/// in a tokenizer.json (real files nest two levels at most).
constexpr int kPipelineNesting = 32;

/// Transformer layers (config num_hidden_layers / n_layer, trace model.num_layers).
constexpr int64_t kLayers = 1024;
/// Attention heads and KV heads.
constexpr int64_t kHeads = 4096;
/// Width of one head.
constexpr int64_t kHeadDim = 4096;
/// hidden_size / n_embd.
constexpr int64_t kHiddenSize = int64_t{1} << 20;
/// intermediate_size / n_inner.
constexpr int64_t kIntermediateSize = int64_t{1} << 22;
/// num_experts of a mixture-of-experts MLP (the largest released models have a few hundred).
constexpr int64_t kExperts = 4096;
/// vocab_size, and one more than the largest token id a tokenizer may name.
constexpr int64_t kVocab = int64_t{1} << 24;
/// max_position_embeddings / n_positions, and a trace's max_positions.
constexpr int64_t kPositions = int64_t{1} << 28;
/// Entries in one layer's cache (a trace's cache_lengths, appended and snapshot counts).
constexpr int64_t kCacheLength = int64_t{1} << 28;

}  // namespace kvscope::limits
