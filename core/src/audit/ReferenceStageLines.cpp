#include "audit/ReferenceStageLines.hpp"

#include <utility>

#include "audit/NumberText.hpp"
#include "audit/RecordedConvState.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

std::vector<std::string> longRopeFactorSets(const ModelConfig& c, const Trace& trace) {
  std::vector<std::string> out;
  const int64_t S = c.usesRope() ? detail::RotaryEmbedding::factorSwitchOf(c.rope) : 0;
  if (S == 0) return out;
  for (const auto& r : trace.requests) {
    const auto P = static_cast<int64_t>(r.promptIds.size());
    const int64_t steps = static_cast<int64_t>(trace.stepsOf(r.id).size());
    std::string line = "ok: LongRoPE (original context " + std::to_string(S) + "): request " + std::to_string(r.id) + "'s ";
    if (P > S)
      line += "records all turn with long_factor (its " + std::to_string(P) + "-token prefill already passes " +
              std::to_string(S) + " positions)";
    else if (S - P + 1 >= steps)
      line += "records all turn with short_factor (no forward passes " + std::to_string(S) + " positions)";
    else
      line += "records turn with short_factor through step " + std::to_string(S - P) + " and with long_factor from step " +
              std::to_string(S - P + 1) + " (position " + std::to_string(S) + ") on; a cache kept across that step holds "
              "keys turned with the short factors (transformers' Phi-3 generate recomputes it there)";
    out.push_back(line);
  }
  return out;
}

namespace {
std::string spanText(int64_t window, int64_t chunk) {
  return window > 0 ? "sliding window " + std::to_string(window)
         : chunk > 0 ? "chunks of " + std::to_string(chunk)
                     : "full attention";
}
}  // namespace

std::vector<std::string> layerKindLines(const ModelConfig& c, const Trace& trace) {
  if (trace.layerKinds.empty()) return {};
  // The checkpoint's span of layer l as the trace states one (window, chunk).
  const auto span = [&c](int64_t l) {
    return std::make_pair(c.isSlidingLayer(l) ? c.slidingWindow : int64_t{0}, c.isChunkedLayer(l) ? c.attentionChunk : int64_t{0});
  };
  int64_t differ = 0, first = -1;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    const TraceLayerKind k = trace.layerKind(l);
    if (std::make_pair(k.window, k.chunk) == span(l)) continue;
    if (first < 0) first = l;
    ++differ;
  }
  if (differ == 0) return {"ok: the trace's layer_kinds fit the checkpoint's attention on every layer"};
  const TraceLayerKind k = trace.layerKind(first);
  const auto [window, chunk] = span(first);
  return {"note: the trace's layer_kinds[" + std::to_string(first) + "] says " + spanText(k.window, k.chunk) +
          " but the checkpoint's layer " + std::to_string(first) + " has " + spanText(window, chunk) +
          (differ > 1 ? " (and " + std::to_string(differ - 1) + " more layer" + (differ > 2 ? "s differ)" : " differs)") : "") +
          "; the reference computes the checkpoint's"};
}

std::string layerKindMismatch(const ModelConfig& c, const Trace& trace) {
  std::vector<int64_t> recurrent;
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (c.isRecurrentLayer(l)) recurrent.push_back(l);
  const std::string layers = std::string(recurrent.size() == 1 ? "layer " : "layers ") + listText(recurrent);
  if (trace.layerKinds.empty())
    return recurrent.empty() ? "" : "the checkpoint's " + layers + " keep a recurrent state (Gated DeltaNet), not K/V "
                                    "rows, but the trace declares no layer_kinds: record it with a recorder that "
                                    "states each layer's kind (kvscope-record, KV Scope's engine)";
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (trace.layerKind(l).recurrent != c.isRecurrentLayer(l))
      return "the trace's layer_kinds[" + std::to_string(l) + "] says " +
             (trace.layerKind(l).recurrent ? "recurrent" : "attention") + " but the checkpoint's layer " +
             std::to_string(l) + " is " + (c.isRecurrentLayer(l) ? "recurrent (Gated DeltaNet)" : "attention") +
             ": a trace of another model";
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (trace.layerKind(l).latent != c.mla.enabled())
      return "the trace's layer_kinds[" + std::to_string(l) + "] says " +
             (trace.layerKind(l).latent ? "latent rows" : "per-head K/V rows") + " but the checkpoint's layer " +
             std::to_string(l) + (c.mla.enabled() ? " caches latent rows (multi-head latent attention)"
                                                  : " caches per-head keys and values") +
             ": a trace of another model";
  // A recurrent layer's recorded states: the checkpoint's conv (its last K inputs as
  // transformers keeps them, or the last K-1 as mlx-lm does) and delta-rule state.
  const DeltaNetConfig& dn = c.deltaNet;
  const std::vector<int64_t> stateShape{dn.valueHeads, dn.keyHeadDim, dn.valueHeadDim};
  for (const TraceStep& st : trace.steps)
    for (int64_t l = 0; l < c.numLayers && l < static_cast<int64_t>(st.layers.size()); ++l) {
      const TraceLayerRecord& r = st.layers[static_cast<size_t>(l)];
      if (!c.isRecurrentLayer(l) || (r.convState.empty() && r.recurrentState.empty())) continue;
      const std::string layer = "layer" + std::to_string(l);
      if (!convStateFits(r.convState.shape, dn.convDim(), dn.convKernel))
        return "the trace's " + layer + ".conv_state rows are " + r.convState.shapeString() +
               " but the checkpoint's layer " + std::to_string(l) + " convolves " + std::to_string(dn.convDim()) +
               " channels over " + std::to_string(dn.convKernel) + " inputs: [" + std::to_string(dn.convDim()) +
               ", " + std::to_string(dn.convKernel) + "] (its last K inputs, as transformers keeps them) or [" +
               std::to_string(dn.convDim()) + ", " + std::to_string(dn.convKernel - 1) +
               "] (the last K-1, as mlx-lm does): a trace of another model";
      if (r.recurrentState.shape != stateShape)
        return "the trace's " + layer + ".recurrent_state rows are " + r.recurrentState.shapeString() +
               " but the checkpoint's layer " + std::to_string(l) + " keeps " + shapeString(stateShape) +
               " (value heads, key head dim, value head dim): a trace of another model";
    }
  return "";
}

std::string referencePassLine(const ReferenceSet::PassCount& n, const Trace& trace) {
  const size_t requests = trace.requests.size();
  return "note: " + std::to_string(n.references) + " uncached reference pass" + (n.references == 1 ? "" : "es") +
         " over " + std::to_string(n.referenceTokens) + " positions for " + std::to_string(requests) + " request" +
         (requests == 1 ? "" : "s") + " (one per request and weights version" +
         (trace.kvCache.quantized() ? ", twice for a quantised cache's rounding" : "") + "), " +
         std::to_string(n.rederivations) + " re-derivation" + (n.rederivations == 1 ? "" : "s") + " of a diverged run";
}

}  // namespace kvscope::detail
