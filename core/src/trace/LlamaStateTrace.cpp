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

using detail::LlamaCacheSection;
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
  const auto sameType = [&](const LlamaCacheSection& c, const std::string& at) {
    for (size_t l = 0; l < c.keys.size(); ++l)
      if (c.keys[l].type != type || c.values[l].type != type)
        throw InputError(s.source, at + "layer " + std::to_string(l) + " v_type",
                         "K is " + detail::ggmlTypeName(type) + " and V " +
                             detail::ggmlTypeName(c.values[l].type) +
                             ": KV Scope audits a cache whose keys and values have one type "
                             "(llama.cpp's -ctk and -ctv the same)");
  };
  sameType(s, "");
  if (s.second) sameType(*s.second, "swa ");
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

// Where a model layer's rows are: which cache of the state, which of its layers.
struct LayerRows {
  const LlamaCacheSection* cache = nullptr;
  size_t index = 0;
};

// The state's layers in model order. One cache holds every layer; llama.cpp's iswa memory
// holds the full-attention layers in its first cache and the sliding ones in its second
// (src/llama-kv-cache-iswa.cpp), each in layer order.
std::vector<LayerRows> layerRows(const LlamaSeqState& s, const ModelConfig& config) {
  const std::string& path = s.source;
  int64_t sliding = 0;
  for (int64_t l = 0; l < config.numLayers; ++l) sliding += config.isSlidingLayer(l) ? 1 : 0;
  const auto layers = [](const LlamaCacheSection& c) { return static_cast<int64_t>(c.keys.size()); };
  std::vector<LayerRows> where;
  if (!s.second) {
    if (layers(s) == config.numLayers) {
      for (int64_t l = 0; l < config.numLayers; ++l) where.push_back({&s, static_cast<size_t>(l)});
      return where;
    }
    if (sliding > 0 && layers(s) == sliding)
      throw InputError(path, "n_layer",
                       std::to_string(layers(s)) + " layers, the checkpoint's " + std::to_string(sliding) +
                           " sliding ones only: the SWA half of an iswa cache, saved without the other "
                           "(LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY, as llama-server's context checkpoints are); "
                           "save the whole sequence state");
    throw InputError(path, "n_layer",
                     std::to_string(layers(s)) + " layers; the checkpoint has " + std::to_string(config.numLayers));
  }
  const int64_t full = config.numLayers - sliding;
  if (sliding == 0)
    throw InputError(path, "swa n_layer",
                     "the state holds two caches (llama.cpp's iswa memory of a sliding-window model), but the "
                     "checkpoint has no sliding layers");
  if (layers(s) != full)
    throw InputError(path, "n_layer",
                     "the iswa state's non-SWA cache holds " + std::to_string(layers(s)) +
                         " layers; the checkpoint has " + std::to_string(full) + " full-attention layers (of " +
                         std::to_string(config.numLayers) + ")");
  if (layers(*s.second) != sliding)
    throw InputError(path, "swa n_layer",
                     "the iswa state's SWA cache holds " + std::to_string(layers(*s.second)) +
                         " layers; the checkpoint has " + std::to_string(sliding) + " sliding layers (of " +
                         std::to_string(config.numLayers) + ")");
  size_t first = 0, second = 0;
  for (int64_t l = 0; l < config.numLayers; ++l)
    where.push_back(config.isSlidingLayer(l) ? LayerRows{&*s.second, second++} : LayerRows{&s, first++});
  return where;
}

// The cells in the order of their positions: the i-th token sits in the i-th smallest.
std::vector<size_t> byPosition(const LlamaCacheSection& c) {
  std::vector<size_t> order(static_cast<size_t>(c.cells()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.positions[a] < c.positions[b]; });
  return order;
}

// llama.cpp leaves out of an iswa state's SWA cache the cells its window masks for the
// sequence (pos_max - pos >= n_swa): those layers' earlier rows are not in the file. The trace
// of a saved state holds every layer's row for every token, so it is read while the sequence
// fits in the window, and refused with the numbers otherwise.
void requireEveryCell(const LlamaSeqState& s, const std::vector<int64_t>& positions, const ModelConfig& config) {
  std::vector<int64_t> held(s.second->positions.begin(), s.second->positions.end());
  std::sort(held.begin(), held.end());
  if (held == positions) return;
  const std::string span = held.empty() ? std::string("none")
                                        : "positions " + std::to_string(held.front()) + " to " +
                                              std::to_string(held.back());
  throw InputError(s.source, "swa cell_count",
                   "the sliding layers' cache holds " + std::to_string(held.size()) + " cells (" + span +
                       ") of the sequence's " + std::to_string(positions.size()) +
                       ": llama.cpp saves only the cells a sliding layer's window (" +
                       std::to_string(config.slidingWindow) +
                       ") still attends, so the earlier rows of those layers are not in the file; KV Scope "
                       "reads an iswa state whose sequence fits in the window (kvscope-record --engine "
                       "llama.cpp records a longer run step by step, each step's rows while the layer holds them)");
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
                         detail::llamaCppModelTypes() + " models (their caches' layouts and row orders known)");
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
  const std::vector<LayerRows> where = layerRows(s, config);
  const int64_t width = config.numKvHeads * config.headDim;
  for (const LayerRows& w : where) {
    const std::string layer = (w.cache == &s ? "layer " : "swa layer ") + std::to_string(w.index);
    for (const auto* r : {&w.cache->keys[w.index], &w.cache->values[w.index]})
      if (r->width != width)
        throw InputError(path, layer + (r == &w.cache->keys[w.index] ? " k_row_bytes" : " v_row_bytes"),
                         "rows of " + std::to_string(r->width) + " values; the checkpoint's " +
                             std::to_string(config.numKvHeads) + " kv heads of " +
                             std::to_string(config.headDim) + " make " + std::to_string(width));
  }

  const std::vector<size_t> order = byPosition(s);
  std::vector<int64_t> positions;
  for (size_t i : order) positions.push_back(s.positions[i]);
  if (s.second) requireEveryCell(s, positions, config);
  const std::vector<size_t> secondOrder = s.second ? byPosition(*s.second) : std::vector<size_t>();
  std::vector<TraceLayerRecord> layers;
  for (int64_t l = 0; l < config.numLayers; ++l) {
    const LayerRows& w = where[static_cast<size_t>(l)];
    const auto& o = w.cache == &s ? order : secondOrder;
    TraceLayerRecord rec;
    rec.cacheLength = s.cells();
    rec.keys = records(w.cache->keys[w.index], o, config.numKvHeads, config.headDim, arch->permutesQk);
    rec.values = records(w.cache->values[w.index], o, config.numKvHeads, config.headDim, false);
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
