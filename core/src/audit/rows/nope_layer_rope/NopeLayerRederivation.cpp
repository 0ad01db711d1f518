#include "audit/rows/nope_layer_rope/NopeLayerRederivation.hpp"

#include <set>
#include <string>
#include <vector>

#include "audit/HypothesisFit.hpp"
#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"

namespace kvscope::detail::rows {

bool explainNopeLayersByRederivation(DiagnosisContext& ctx, int64_t request, const StepAnalysis& a,
                                     const Evidence& base) {
  const ModelConfig* c = ctx.refs.modelConfig();
  if (!c || a.structural() || a.referenceMissing || a.firstBadLayer < 0) return false;
  const bool more = c->qkL2Norm || c->queryScaleNopeOnly || c->attentionChunk > 0;
  if (!more || c->ropeLayers.empty()) return false;
  const int64_t L = a.firstBadLayer;
  std::vector<std::set<int64_t>> candidates = {{L}};
  if (c->intervalRopeLayers.size() == c->ropeLayers.size()) {
    std::set<int64_t> differ;
    for (size_t l = 0; l < c->ropeLayers.size(); ++l)
      if (c->ropeLayers[l] != c->intervalRopeLayers[l]) differ.insert(static_cast<int64_t>(l));
    if (differ.count(L) > 0 && differ.size() > 1) candidates.push_back(differ);
  }
  const auto h = hypothesisSteps(ctx.trace, ctx.stepsFrom(request, a));
  if (!h) return false;
  for (const auto& layers : candidates) {
    for (const bool chunks : {false, true}) {
      if (chunks && c->attentionChunk == 0) continue;
      PassHypothesis change;
      change.ropeFlipped = layers;
      change.chunksFlip = chunks;
      const auto fit = testHypothesis(ctx.refs, ctx.trace, ctx.tol, *h, change);
      if (!fit) continue;
      Evidence ev = base;
      ev["flipped_layers"] = static_cast<double>(layers.size());
      ev["chunks_flipped"] = chunks ? 1.0 : 0.0;
      ev["layer_rotates"] = c->ropeOn(L) ? 1.0 : 0.0;
      addFitEvidence(ev, *fit);
      const std::string names = listText(layers);
      std::string what = "RoPE";
      if (c->qkL2Norm) what += ", the q/k L2 norm";
      if (c->queryScaleNopeOnly) what += ", the query temperature";
      if (chunks) what += ", the chunking";
      std::string ex = "layer " + std::to_string(L) + "'s keys differ from the reference from position " +
                       std::to_string(a.firstBadStreamIndex) + " (values " +
                       (a.valueError.size() > static_cast<size_t>(L) && a.valueError[static_cast<size_t>(L)] <=
                                a.valueTol[static_cast<size_t>(L)]
                            ? "exact"
                            : "differ too") +
                       "); an uncached pass whose layer" + (layers.size() > 1 ? "s " + names + " read their" : " " + names + " reads its") +
                       " no_rope_layers entr" + (layers.size() > 1 ? "ies" : "y") + " inverted (" + what +
                       " as the other kind of layer has them) reproduces " + fitText(*fit);
      if (layers.size() > 1)
        ex += "; those are the layers where no_rope_layers and the no_rope_layer_interval rule disagree: the path "
              "runs the interval's pattern and ignores the list";
      ctx.add(FindingDraft(finding::NopeLayerRope)
                  .at(*a.step)
                  .layer(L)
                  .position(a.firstBadStreamIndex)
                  .confidence(0.9)
                  .explanation(ex)
                  .evidence(std::move(ev)),
              a);
      return true;
    }
  }
  return false;
}

}  // namespace kvscope::detail::rows
