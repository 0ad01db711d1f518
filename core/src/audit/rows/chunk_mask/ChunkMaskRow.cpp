// `chunk_mask` (KV Scope's): on a checkpoint with chunked attention (Llama 4's
// attention_chunk_size), the cached path lets a chunked layer's queries see keys before their
// chunk's start, as a mask that takes the chunk for a sliding window of its size does
// (huggingface/transformers#37351; a chunk mask built from the cache's whole length over a
// cache that keeps only chunk - 1 keys, PaddlePaddle/PaddleFormers#4536). Every K/V record of
// that layer matches (they are computed before its attention); the layer after it differs from
// the first query past the first chunk, or only the logits. Claimed when an uncached pass whose
// chunked layers attend over a sliding window of the chunk reproduces every record from there.
#include "audit/HypothesisFit.hpp"
#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class ChunkMaskRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::ChunkMask,
        "a chunked layer's K/V records exact, the next layer's wrong from the first position past "
        "the first chunk (or only the logits), on a checkpoint with chunked attention; an "
        "uncached pass whose chunked layers attend over a sliding window of the chunk's size "
        "reproduces them",
        "the chunked layers' attention mask: a query at position p sees only the keys of its "
        "own chunk, from floor(p / attention_chunk_size) * attention_chunk_size on, not the "
        "last attention_chunk_size keys",
        MatrixOrigin::KvScope,
        118,
        AuditStage::Positions,
        {},
        {"Llama 4's chunked attention masked wrongly (huggingface/transformers#37351; a chunk "
         "mask over a cache that keeps chunk - 1 keys, PaddlePaddle/PaddleFormers#4536; "
         "docs/audit.md)"},
        {{"chunk_mask",
          "the cached path masks `layer`'s chunked attention as a sliding window of the chunk's "
          "size (-1 = every chunked layer); needs a checkpoint with chunked attention (llama4_text)",
          "the next layer's keys and values wrong from the first position past the first chunk, "
          "the layer's own exact",
          {{"layer", "chunked layer affected (-1 = every chunked layer)", "-1"}}}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "sees past its chunk"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& base,
               bool logitsOnly) const override {
    Evidence ev = base;
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || config->attentionChunk <= 0 || a.structural() || a.referenceMissing) return false;
    const int64_t C = config->attentionChunk, n = config->numLayers;
    // The layer whose attention saw too much: its records are exact, the next layer's are not.
    int64_t layer = -1, first = -1;
    if (logitsOnly) {
      if (a.firstBadLayer >= 0 || !a.logitsDiverged) return false;
      layer = n - 1;
      first = a.lastRealStreamIndex();
    } else {
      if (a.firstBadLayer <= 0) return false;
      layer = a.firstBadLayer - 1;
      first = a.firstBadStreamIndex;
    }
    // Within the first chunk a window of the chunk's size sees the same keys.
    if (!config->isChunkedLayer(layer) || first < C) return false;
    const auto h = hypothesisSteps(ctx.trace, ctx.stepsFrom(r, a));
    if (!h) return false;
    // Every chunked layer from `layer` on, then `layer` alone.
    for (const bool above : {true, false}) {
      PassHypothesis change;
      for (int64_t l = layer; l <= (above ? n - 1 : layer); ++l)
        if (config->isChunkedLayer(l)) change.chunkAsWindow.insert(l);
      const auto fit = testHypothesis(ctx.refs, ctx.trace, ctx.tol, *h, change);
      if (!fit) continue;
      const int64_t layers = static_cast<int64_t>(change.chunkAsWindow.size());
      ev["chunk"] = static_cast<double>(C);
      ev["chunk_start"] = static_cast<double>(first / C * C);
      ev["windowed_layers"] = static_cast<double>(layers);
      addFitEvidence(ev, *fit);
      const std::string l = std::to_string(layer);
      std::string ex = logitsOnly ? "every K/V record is exact but the logits differ from position " + std::to_string(first)
                                  : "layer " + l + "'s K/V records are exact but layer " + std::to_string(layer + 1) +
                                        "'s differ from position " + std::to_string(first);
      const std::string names = listText(change.chunkAsWindow);
      ex += ", past the first chunk of " + std::to_string(C) + " positions; an uncached pass whose chunked layer" +
            (layers > 1 ? "s " + names + " attend" : " " + names + " attends") + " over the last " +
            std::to_string(C) + " keys (a sliding window of the chunk's size) instead of the query's own chunk "
            "reproduces " + fitText(*fit);
      ex += ": the query at position " + std::to_string(first) + " saw keys before its chunk's start at " +
            std::to_string(first / C * C);
      ctx.add(FindingDraft(finding::ChunkMask)
                  .at(*a.step)
                  .layer(layer)
                  .position(first)
                  .confidence(0.95)
                  .explanation(ex)
                  .evidence(std::move(ev)),
              a);
      return true;
    }
    return false;
  }
};

}  // namespace

const FailureRow& chunkMask() {
  static const ChunkMaskRow row;
  return row;
}

}  // namespace kvscope::detail::rows
