#include "kvscope/MlxPromptCacheTrace.hpp"

#include <algorithm>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "trace/MlxPromptCache.hpp"
#include "trace/SavedCacheTrace.hpp"

namespace kvscope {

namespace {

constexpr size_t kMaxMlxHeader = 1 << 20;

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One scalar of a layer's state ("i.2"), an integer.
int64_t scalar(const SafetensorsFile& f, const std::string& name) {
  const auto v = f.readInt64(name);
  if (v.size() != 1) throw InputError(f.path(), name, "expected one integer (a scalar of the cache's state)");
  return v.front();
}

std::vector<int64_t> namedTokens(const SafetensorsFile& f) {
  const auto it = f.metadata().find("0.tokens");
  if (it == f.metadata().end()) return {};
  std::vector<int64_t> out;
  std::string cur;
  for (char c : it->second + ",") {
    if (c == ',') {
      if (cur.empty()) throw InputError(f.path(), "0.tokens", "expected comma-separated token ids");
      try {
        size_t used = 0;
        out.push_back(std::stoll(cur, &used));
        if (used != cur.size() || out.back() < 0) throw std::invalid_argument(cur);
      } catch (const std::exception&) {
        throw InputError(f.path(), "0.tokens", "'" + cur + "' is not a token id");
      }
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

// mlx-lm turns DeepSeek's roped key part as pairs (2i, 2i+1) left in place (traditional RoPE);
// V3 with rope_interleave (transformers, KV Scope's records) writes the turned pairs evens
// first, then odds: each row [.., d] in that order.
FloatTensor deinterleavedFeatures(const FloatTensor& t) {
  FloatTensor out = t;
  const int64_t d = t.shape.back(), half = d / 2;
  for (size_t row = 0; row + static_cast<size_t>(d) <= t.data.size(); row += static_cast<size_t>(d))
    for (int64_t j = 0; j < half; ++j) {
      out.data[row + static_cast<size_t>(j)] = t.data[row + static_cast<size_t>(2 * j)];
      out.data[row + static_cast<size_t>(half + j)] = t.data[row + static_cast<size_t>(2 * j + 1)];
    }
  return out;
}

// mlx-lm's ArraysCache of a Gated DeltaNet layer (MambaCache, its subclass in older mlx-lm):
// entry 0 the conv's last K-1 inputs [1, K-1, C] time-major, entry 1 the recurrent state
// [1, Hv, Dv, Dk]; its saved state is ([conv, state], left_padding, lengths): "i.0.0", "i.0.1".
// As the trace holds them: conv [C, K-1] (docs/trace-format.md takes K or K-1 inputs), recurrent
// state [Hv, Dk, Dv].
void readLayerState(const SafetensorsFile& f, const std::string& layer, const DeltaNetConfig& dn,
                    TraceLayerRecord& rec) {
  const std::string convName = layer + ".0.0", stateName = layer + ".0.1";
  const int64_t C = dn.convDim(), Hv = dn.valueHeads, Dk = dn.keyHeadDim, Dv = dn.valueHeadDim;
  for (const auto& name : {convName, stateName}) {
    if (!f.contains(name))
      throw InputError(f.path(), name, "missing: an ArraysCache layer keeps its conv inputs (entry 0) and "
                                       "recurrent state (entry 1)");
    if (f.entry(name).shape.size() < 2)
      throw InputError(f.path(), name, "empty: the layer has not been run (a cache before any forward)");
  }
  const auto& conv = f.entry(convName);
  if (conv.shape.size() != 3 || conv.shape[0] != 1 || conv.shape[2] != C ||
      (conv.shape[1] != dn.convKernel - 1 && conv.shape[1] != dn.convKernel))
    throw InputError(f.path(), convName,
                     "shape " + shapeString(conv.shape) + "; the checkpoint's conv keeps [1, " +
                         std::to_string(dn.convKernel - 1) + ", " + std::to_string(C) +
                         "] (its last linear_conv_kernel_dim - 1 inputs, each of the conv's channels; [1, " +
                         std::to_string(dn.convKernel) + ", " + std::to_string(C) + "] is read too)");
  const int64_t W = conv.shape[1];
  FloatTensor time = FloatTensor::zeros({W, C});
  f.readFloatElements(convName, 0, static_cast<size_t>(W * C), time.data.data());
  rec.convState = FloatTensor::zeros({C, W});
  for (int64_t w = 0; w < W; ++w)
    for (int64_t c = 0; c < C; ++c)
      rec.convState.data[static_cast<size_t>(c * W + w)] = time.data[static_cast<size_t>(w * C + c)];
  const auto& state = f.entry(stateName);
  if (state.shape != std::vector<int64_t>{1, Hv, Dv, Dk})
    throw InputError(f.path(), stateName,
                     "shape " + shapeString(state.shape) + "; the checkpoint's recurrent state is [1, " +
                         std::to_string(Hv) + ", " + std::to_string(Dv) + ", " + std::to_string(Dk) +
                         "] (value heads, value head dim, key head dim)");
  FloatTensor vk = FloatTensor::zeros({Hv, Dv, Dk});
  f.readFloatElements(stateName, 0, vk.data.size(), vk.data.data());
  rec.recurrentState = FloatTensor::zeros({Hv, Dk, Dv});
  for (int64_t h = 0; h < Hv; ++h)
    for (int64_t v = 0; v < Dv; ++v)
      for (int64_t k = 0; k < Dk; ++k)
        rec.recurrentState.data[static_cast<size_t>((h * Dk + k) * Dv + v)] =
            vk.data[static_cast<size_t>((h * Dv + v) * Dk + k)];
}

bool isStateClass(const std::string& c) { return c == "ArraysCache" || c == "MambaCache"; }

}  // namespace

bool isMlxPromptCacheFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), 8) || n == 0 || n > kMaxMlxHeader) return false;
  std::string header(static_cast<size_t>(n), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return false;
  const auto doc = nlohmann::json::parse(header, nullptr, false);
  if (!doc.is_object() || !doc.contains("__metadata__") || !doc["__metadata__"].is_object()) return false;
  const auto& m = doc["__metadata__"];
  return m.contains("1.0") && m["1.0"].is_string() && endsWith(m["1.0"].get<std::string>(), "Cache") &&
         m.contains("2.0");
}

Trace readMlxPromptCacheTrace(const std::string& path, const Checkpoint& checkpoint,
                              const std::vector<int64_t>& tokens) {
  return detail::mlxPromptCacheTrace(path, checkpoint.config(), tokens);
}

namespace detail {

Trace mlxPromptCacheTrace(const std::string& path, const ModelConfig& config, const std::vector<int64_t>& givenTokens) {
  const auto file = SafetensorsFile::open(path);
  const SafetensorsFile& f = *file;
  std::vector<std::string> classes;
  for (;;) {
    const auto it = f.metadata().find("1." + std::to_string(classes.size()));
    if (it == f.metadata().end()) break;
    classes.push_back(it->second);
  }
  if (classes.empty()) throw InputError(path, "1.0", "no cache classes in the metadata: not an mlx-lm prompt cache");
  if (static_cast<int64_t>(classes.size()) != config.numLayers)
    throw InputError(path, "1." + std::to_string(classes.size() - 1),
                     std::to_string(classes.size()) + " cache layers; the checkpoint has " +
                         std::to_string(config.numLayers));
  // The first layer that keeps rows (a Gated DeltaNet layer keeps a state).
  int64_t rowLayer = 0;
  while (rowLayer + 1 < static_cast<int64_t>(classes.size()) && isStateClass(classes[static_cast<size_t>(rowLayer)]))
    ++rowLayer;
  // mlx-lm's DeepSeek V3 caches latent rows and roped key parts; its V2 each head's decompressed
  // key and value (model.latent_records "heads"), which the keys tell.
  const MlaConfig& mla = config.mla;
  const std::string rows = std::to_string(rowLayer);
  const auto& firstKeys = f.entry(rows + (isStateClass(classes[static_cast<size_t>(rowLayer)]) ? ".0.0" : ".0"));
  const bool heads = mla.enabled() && firstKeys.shape.size() == 4 && firstKeys.shape[1] == config.numHeads &&
                     firstKeys.shape[3] == mla.queryDim();
  const TraceModelInfo shape = TraceModelInfo::ofConfig(config, heads);  // the records the layers hold
  const int64_t kvHeads = shape.numKvHeads;
  int64_t offset = -1;
  std::vector<TraceLayerRecord> layers;
  for (size_t l = 0; l < classes.size(); ++l) {
    const std::string i = std::to_string(l);
    const std::string& c = classes[l];
    const bool recurrent = config.isRecurrentLayer(static_cast<int64_t>(l));
    if (isStateClass(c) != recurrent)
      throw InputError(path, "1." + i,
                       "an mlx-lm " + c + " layer, but the checkpoint's layer " + i + " is " +
                           (recurrent ? "a Gated DeltaNet layer (an ArraysCache of its state)"
                                      : "attention (a KVCache of its rows)") + ": a cache of another model");
    if (recurrent) {  // a state, no rows
      TraceLayerRecord rec;
      readLayerState(f, i, config.deltaNet, rec);
      layers.push_back(std::move(rec));
      continue;
    }
    if (c != "KVCache" && c != "RotatingKVCache")
      throw InputError(path, "1." + i,
                       "an mlx-lm " + c + " layer; KV Scope reads KVCache, RotatingKVCache and ArraysCache");
    const int64_t layerOffset = scalar(f, i + ".2");
    if (c == "RotatingKVCache") {
      const int64_t maxSize = scalar(f, i + ".4"), index = scalar(f, i + ".5");
      if (layerOffset > maxSize || index != layerOffset)
        throw InputError(path, i + ".5",
                         "a RotatingKVCache whose ring has wrapped (offset " + std::to_string(layerOffset) +
                             ", max_size " + std::to_string(maxSize) + ", write index " + std::to_string(index) +
                             "): its slots are out of position order, which KV Scope does not read yet");
    }
    if (offset >= 0 && layerOffset != offset)
      throw InputError(path, i + ".2",
                       "offset " + std::to_string(layerOffset) + "; layer " + rows + "'s is " + std::to_string(offset));
    offset = layerOffset;
    TraceLayerRecord rec;
    rec.cacheLength = offset;
    for (int kv = 0; kv < 2; ++kv) {
      const std::string name = i + "." + std::to_string(kv);
      const auto& e = f.entry(name);
      const int64_t d = kv == 0 ? shape.headDim : shape.valueDim();
      if (e.shape.size() != 4 || e.shape[0] != 1 || e.shape[1] != kvHeads || e.shape[3] != d ||
          e.shape[2] < offset || offset < 0)
        throw InputError(path, name,
                         "shape " + shapeString(e.shape) + " with offset " + std::to_string(offset) +
                             "; the checkpoint's cache is [1, " + std::to_string(kvHeads) + ", >= offset, " +
                             std::to_string(d) + "]");
      const int64_t S = e.shape[2];
      FloatTensor out = FloatTensor::zeros({kvHeads, offset, d});
      for (int64_t h = 0; h < kvHeads; ++h)
        f.readFloatElements(name, static_cast<size_t>(h * S * d), static_cast<size_t>(offset * d),
                            out.data.data() + static_cast<size_t>(h * offset * d));
      if (kv == 1 && mla.enabled() && !heads && mla.ropePairs == MlaConfig::RopePairs::Deinterleaved)
        out = deinterleavedFeatures(out);
      (kv == 0 ? rec.keys : rec.values) = std::move(out);
    }
    layers.push_back(std::move(rec));
  }
  const std::vector<int64_t> tokens = savedCacheTokens(path, "0.tokens", namedTokens(f), givenTokens);
  if (offset < 0) offset = static_cast<int64_t>(tokens.size());  // states alone: they keep no count
  if (static_cast<int64_t>(tokens.size()) != offset)
    throw InputError(path, "0.tokens",
                     std::to_string(tokens.size()) + " tokens for a cache of " + std::to_string(offset) + " rows");
  if (offset == 0) throw InputError(path, rows + ".2", "the cache is empty (offset 0)");
  std::vector<int64_t> positions(static_cast<size_t>(offset));
  std::iota(positions.begin(), positions.end(), 0);
  Trace t = savedCacheTrace("mlx-lm prompt cache", path, config, tokens, std::move(positions), std::move(layers),
                            heads);
  t.tensorDtype = firstKeys.dtype == SafetensorsDtype::F16 ? "F16" : firstKeys.dtype == SafetensorsDtype::BF16 ? "BF16" : "F32";
  t.model.computeDtype = t.tensorDtype == "F16" ? "float16" : t.tensorDtype == "BF16" ? "bfloat16" : "float32";
  return t;
}

}  // namespace detail

}  // namespace kvscope
