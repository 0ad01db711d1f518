// mlx-lm prompt caches (save_prompt_cache: safetensors naming each layer's cache class in its
// metadata): the container, the classes, the state scalars (offset, max_size, write index),
// the key/value shapes and offsets against a three-layer Llama of two 16-wide kv heads (the
// fixture's shape) and a three-layer DeepSeek V3 (latent rows of 32, roped parts of 8 turned in
// place, or 4 decompressed heads: the deepseek seeds) and a four-layer Qwen3-Next (ArraysCache
// states of its Gated DeltaNet layers 0 and 2: the qwen3_next seed), the token list of the
// metadata; given tokens when it has none.
#include "FuzzSupport.hpp"
#include "kvscope/ModelConfig.hpp"
#include "trace/MlxPromptCache.hpp"

#include <nlohmann/json.hpp>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelConfig config = ModelConfig::fromJson(
      nlohmann::json{{"model_type", "llama"}, {"vocab_size", 1200}, {"hidden_size", 64},
                     {"intermediate_size", 128}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"max_position_embeddings", 128}},
      "fuzz-config.json");
  static const ModelConfig latent = ModelConfig::fromJson(
      nlohmann::json{{"model_type", "deepseek_v3"}, {"vocab_size", 1200}, {"hidden_size", 64},
                     {"intermediate_size", 128}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                     {"kv_lora_rank", 32}, {"q_lora_rank", nullptr}, {"qk_rope_head_dim", 8},
                     {"qk_nope_head_dim", 16}, {"v_head_dim", 12}, {"rope_interleave", true},
                     {"n_routed_experts", 8}, {"n_group", 2}, {"topk_group", 1}, {"num_experts_per_tok", 2},
                     {"max_position_embeddings", 128}},
      "fuzz-config.json");
  static const ModelConfig deltaNet = ModelConfig::fromJson(
      nlohmann::json{{"model_type", "qwen3_next"}, {"vocab_size", 1200}, {"hidden_size", 48},
                     {"intermediate_size", 96}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 128},
                     {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
                     {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 8}, {"linear_num_key_heads", 2},
                     {"linear_num_value_heads", 4}, {"linear_value_head_dim", 8}, {"partial_rotary_factor", 0.25},
                     {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 24},
                     {"shared_expert_intermediate_size", 32}, {"mlp_only_layers", {1}}},
      "fuzz-config.json");
  const auto path = fuzz::scratch() / "input.safetensors";
  fuzz::writeFile(path, data, size);
  for (const ModelConfig* c : {&config, &latent, &deltaNet}) {
    fuzz::accepts([&] { (void)detail::mlxPromptCacheTrace(path.string(), *c, {}); });
    fuzz::accepts([&] { (void)detail::mlxPromptCacheTrace(path.string(), *c, std::vector<int64_t>(8, 5)); });
  }
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
