// llama.cpp sequence states ('ggsq' files: a saved llama-server slot, llama_state_seq_save_file;
// llama_state_seq_get_data bytes): the header, token list, streams, cells, per-layer row types
// and sizes, transposed values, an iswa state's second cache; then the trace made of what
// parses, for a two-layer Llama of one 32-wide kv head and for a six-layer Gemma 3 whose five
// sliding layers llama.cpp keeps in that second cache (the fixtures' shapes), so the checks
// against the model run too.
#include "FuzzSupport.hpp"
#include "kvscope/ModelConfig.hpp"
#include "trace/LlamaSeqState.hpp"

#include <nlohmann/json.hpp>

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelConfig config = ModelConfig::fromJson(
      nlohmann::json{{"model_type", "llama"}, {"vocab_size", 1200}, {"hidden_size", 64},
                     {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
                     {"num_key_value_heads", 1}, {"head_dim", 32}, {"max_position_embeddings", 128}},
      "fuzz-config.json");
  static const ModelConfig gemma = ModelConfig::fromJson(
      nlohmann::json{{"model_type", "gemma3_text"}, {"vocab_size", 1200}, {"hidden_size", 64},
                     {"intermediate_size", 64}, {"num_hidden_layers", 6}, {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"head_dim", 16}, {"sliding_window", 8},
                     {"layer_types", {"sliding_attention", "sliding_attention", "sliding_attention",
                                      "sliding_attention", "sliding_attention", "full_attention"}},
                     {"max_position_embeddings", 128}},
      "fuzz-gemma3-config.json");
  const auto path = fuzz::scratch() / "input.ggsq";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] {
    const detail::LlamaSeqState s = detail::readLlamaSeqStateFile(path.string());
    fuzz::accepts([&] { (void)detail::traceFromLlamaState(s, config, "F16", true); });
    (void)detail::traceFromLlamaState(s, gemma, "F32", false);
  });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
