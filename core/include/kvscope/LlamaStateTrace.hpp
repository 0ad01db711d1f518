// A llama.cpp sequence state as a trace: what a llama.cpp user can hand KV Scope about a
// cached run without changing their code. llama-server saves a slot's cache with
// POST /slots/{id}?action=save (--slot-save-path), a program with
// llama_state_seq_save_file: a 'ggsq' file (format versions 2 and 3) holding the tokens the
// sequence was saved with and, per cache cell, its position and per layer its K and V rows
// in the cache's type (f32, f16, bf16, q8_0, q4_0, ...). The audit recomputes those tokens
// without a cache and compares every cell's rows with the reference at the same position:
// the cache stage of the method for a run whose logits were not kept.
//
// Read against the checkpoint's config (the file holds rows of n_kv_heads x head_dim values
// and no shapes): the layer count and row widths must match it. Gemma 2 and 3 run llama.cpp's
// iswa cache, whose state holds the full-attention layers, then the sliding ones: they are
// placed by the config's sliding layers, and read while the second cache holds every cell (a
// sliding layer's rows outside its window are not saved). llama.cpp's llama
// architecture (HF llama and mistral) keeps each key head's rotary pairs permuted
// (convert_hf_to_gguf.py's LlamaModel.permute); that is undone so the rows compare with an
// HF-ordered reference. A q8_0 / q4_0 cache is declared as such (kv_cache), so the audit
// budgets for its rounding; an f16 cache's rows are judged with f16 storage's floor.
//
// The compute dtype is llama.cpp's on the CPU: activations meet each weight in the weight's
// dot-product type (F32: float32, F16: float16, BF16: bfloat16, a block-quantised type:
// 8-bit blocks, budgeted as bfloat16) and the queries meet the cache in its type (f16:
// float16, q8_0 / q4_0: 8-bit blocks), and flash attention, on by default (llama.cpp's
// "auto"; the state does not say), rounds the queries and value sums to float16: the
// coarsest applies, float16 at least. Against a GGUF checkpoint its
// own weight types decide; an HF checkpoint is taken as converted by convert_hf_to_gguf.py's
// default (float16, bfloat16 weights stay bfloat16). kvscope_trace's llama.cpp recorder
// declares the same (llama_cpp_trace.compute_dtype).
#pragma once

#include <string>
#include <vector>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

/// Whether `path` starts like a llama.cpp sequence state (a 'ggsq' file or
/// llama_state_seq_get_data bytes). False for a file that cannot be read.
bool isLlamaStateFile(const std::string& path);

/// The state as a one-request, one-step trace of `checkpoint`'s model: the step feeds the file's
/// tokens, at the positions of the cells that hold them (cells ordered by position), and its
/// records are the cells' rows. Throws InputError naming the file and the field: a damaged
/// file (LlamaSeqState.hpp), a state without its token list, a token count that differs from
/// the cells, a layer count or row width other than the model's, K and V of different cache
/// types, a family KV Scope does not read from llama.cpp, `tokens` (the caller's, when given)
/// other than the file's.
Trace readLlamaStateTrace(const std::string& path, const Checkpoint& checkpoint,
                          const std::vector<int64_t>& tokens = {});

}  // namespace kvscope
