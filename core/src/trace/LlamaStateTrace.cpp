#include "kvscope/LlamaStateTrace.hpp"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "gguf/GgmlBlocks.hpp"
#include "gguf/GgufModelView.hpp"
#include "kvscope/Error.hpp"
#include "trace/LlamaSeqState.hpp"
#include "trace/SavedCacheTrace.hpp"

namespace kvscope {

namespace {

using detail::LlamaSeqState;
using detail::LlamaStateRows;

// The rows of the cells in `order` as records [h_kv, cells, d]; with `permuted`, each head's
// rotary pairs (2p, 2p + 1) go back to HF's (p, p + d/2).
FloatTensor records(const LlamaStateRows& r, const std::vector<size_t>& order, int64_t heads,
                    int64_t d, bool permuted) {
  const auto cells = static_cast<int64_t>(order.size());
  FloatTensor t = FloatTensor::zeros({heads, cells, d});
  const int64_t half = d / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < cells; ++i) {
      const float* src = r.rows.data() + order[static_cast<size_t>(i)] * static_cast<size_t>(r.width) +
                         static_cast<size_t>(h * d);
      float* dst = t.data.data() + static_cast<size_t>((h * cells + i) * d);
      if (!permuted) {
        std::copy(src, src + d, dst);
        continue;
      }
      for (int64_t p = 0; p < half; ++p) {
        dst[p] = src[2 * p];
        dst[half + p] = src[2 * p + 1];
      }
    }
  return t;
}

// The trace's cache declaration for the state's cache type (one type for K and V).
void declareCacheType(Trace& t, const LlamaSeqState& s, const ModelConfig& config) {
  const uint32_t type = s.keys.front().type;
  for (size_t l = 0; l < s.keys.size(); ++l)
    if (s.keys[l].type != type || s.values[l].type != type)
      throw InputError(s.source, "layer " + std::to_string(l) + " v_type",
                       "K is " + detail::ggmlTypeName(type) + " and V " +
                           detail::ggmlTypeName(s.values[l].type) +
                           ": KV Scope audits a cache whose keys and values have one type "
                           "(llama.cpp's -ctk and -ctv the same)");
  const std::string name = detail::ggmlTypeName(type);
  if (name == "F32" || name == "F16" || name == "BF16") {
    t.tensorDtype = name;  // the audit's storage floor
    return;
  }
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  KvQuantization q;
  q.dtype = lower;
  bool known = false;
  for (const auto& d : KvQuantization::dtypes()) known = known || d == lower;
  if (!known || !q.blockwise())
    throw InputError(s.source, "layer 0 k_type",
                     "a " + name + " cache; KV Scope budgets for f32, f16, bf16, q8_0 and q4_0 caches");
  if (config.headDim % KvQuantization::kBlockElements != 0)
    throw InputError(s.source, "layer 0 k_type",
                     "a " + name + " cache of head_dim " + std::to_string(config.headDim) +
                         ": its 32-element blocks span two heads, which the audit cannot budget for");
  q.scale = "per_block";
  t.kvCache = q;
}

// The header's rule: the coarsest rounding llama.cpp's CPU path gives the activations.
std::string computeDtype(const std::string& stored, bool gguf, const std::string& cacheType) {
  const auto rank = [](const std::string& d) { return d == "float32" ? 0 : d == "float16" ? 1 : 2; };
  std::string weights = "float32";  // stored: "F16", "Q8_0", "mixed (F32, Q8_0)"
  const auto has = [&](const char* t) { return stored.find(t) != std::string::npos; };
  if (!gguf) weights = has("BF16") ? "bfloat16" : "float16";  // convert_hf_to_gguf.py
  else if (stored.find("Q") != std::string::npos) weights = "bfloat16";  // 8-bit activations
  else if (has("BF16")) weights = "bfloat16";
  else if (has("F16")) weights = "float16";
  const std::string cache = cacheType == "F32" || cacheType == "F16" ? "float16" : "bfloat16";
  return rank(cache) > rank(weights) ? cache : weights;
}

}  // namespace

bool isLlamaStateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t head[4] = {};
  if (!in.read(reinterpret_cast<char*>(head), 4)) return false;
  return detail::looksLikeLlamaSeqState(head, 4);
}

Trace readLlamaStateTrace(const std::string& path, const Checkpoint& checkpoint,
                          const std::vector<int64_t>& tokens) {
  return detail::traceFromLlamaState(detail::readLlamaSeqStateFile(path), checkpoint.config(),
                                     checkpoint.storedDtype(), checkpoint.isGguf(), tokens);
}

namespace detail {

Trace traceFromLlamaState(const LlamaSeqState& s, const ModelConfig& config, const std::string& storedDtype,
                          bool gguf, const std::vector<int64_t>& given) {
  const std::string& path = s.source;
  const std::string modelType = architectureName(config.architecture);
  const auto* arch = detail::llamaCppArchitectureOf(modelType);
  if (!arch)
    throw InputError(path, "model",
                     "the checkpoint is a " + modelType + " model; KV Scope reads llama.cpp states of " +
                         detail::llamaCppModelTypes() + " models (one attention cache, a known row order)");
  if (!s.hasTokens)
    throw InputError(path, "tokens",
                     "llama_state_seq_get_data bytes carry no token list; save the sequence with "
                     "llama_state_seq_save_file (or the server's /slots/{id}?action=save), which "
                     "stores the tokens the reference recomputes");
  if (s.cells() == 0)
    throw InputError(path, "cell_count", "the sequence held no cache cells when it was saved");
  if (static_cast<int64_t>(s.tokens.size()) != s.cells())
    throw InputError(path, "n_token_count",
                     "the file lists " + std::to_string(s.tokens.size()) + " tokens but the cache holds " +
                         std::to_string(s.cells()) + " cells for the sequence");
  if (static_cast<int64_t>(s.keys.size()) != config.numLayers)
    throw InputError(path, "n_layer",
                     std::to_string(s.keys.size()) + " layers; the checkpoint has " +
                         std::to_string(config.numLayers));
  const int64_t width = config.numKvHeads * config.headDim;
  for (size_t l = 0; l < s.keys.size(); ++l)
    for (const auto* r : {&s.keys[l], &s.values[l]})
      if (r->width != width)
        throw InputError(path, "layer " + std::to_string(l) + (r == &s.keys[l] ? " k_row_bytes" : " v_row_bytes"),
                         "rows of " + std::to_string(r->width) + " values; the checkpoint's " +
                             std::to_string(config.numKvHeads) + " kv heads of " +
                             std::to_string(config.headDim) + " make " + std::to_string(width));

  // The i-th token sits in the cell of the i-th smallest position.
  std::vector<size_t> order(static_cast<size_t>(s.cells()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.positions[a] < s.positions[b]; });
  std::vector<int64_t> positions;
  for (size_t i : order) positions.push_back(s.positions[i]);
  std::vector<TraceLayerRecord> layers;
  for (int64_t l = 0; l < config.numLayers; ++l) {
    TraceLayerRecord rec;
    rec.cacheLength = s.cells();
    rec.keys = records(s.keys[static_cast<size_t>(l)], order, config.numKvHeads, config.headDim, arch->permutesQk);
    rec.values = records(s.values[static_cast<size_t>(l)], order, config.numKvHeads, config.headDim, false);
    layers.push_back(std::move(rec));
  }
  Trace t = savedCacheTrace(
      "llama.cpp sequence state" + (s.version ? " (ggsq v" + std::to_string(s.version) + ")" : std::string()), path,
      config, savedCacheTokens(path, "tokens", std::vector<int64_t>(s.tokens.begin(), s.tokens.end()), given),
      std::move(positions), std::move(layers));
  declareCacheType(t, s, config);
  t.model.computeDtype = computeDtype(storedDtype, gguf, detail::ggmlTypeName(s.keys.front().type));
  return t;
}

}  // namespace detail

}  // namespace kvscope
