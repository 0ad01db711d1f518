// `sink_dropped` (KV Scope's): on a checkpoint with learned attention sinks (GPT-OSS), the
// cached path runs a layer's attention as a plain softmax, as attention backends without sink
// support did (vllm-project/vllm#52156). Every K/V record of that layer matches; what differs
// is its attention output, so the records of the layers after it (or only the logits).
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DroppedFeatureRow.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/sink_dropped/SinkDroppedEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class SinkDroppedRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::SinkDropped,
        "a layer's K/V records exact, the next layer's keys and values wrong from position 0 "
        "on (or only the logits), on a checkpoint with attention sinks; an uncached pass "
        "without the sinks on that layer reproduces them",
        "whether the attention kernel adds the learned sink logit (self_attn.sinks) to every "
        "query's softmax on every path",
        MatrixOrigin::KvScope,
        115,
        AuditStage::Numerics,
        {},
        {"GPT-OSS's attention sinks ignored by an attention backend (vllm-project/vllm#52156; "
         "docs/audit.md)"},
        {{"sink_dropped",
          "from step `step` on, the cached path runs `layer`'s attention without the learned "
          "sinks (-1 = every layer); needs a checkpoint with attention sinks (gpt_oss)",
          "the next layer's keys and values wrong from position 0 on, the layer's own exact",
          fromStepAtLayerParameters()}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "sinks dropped"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
               bool logitsOnly) const override {
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || !config->attentionSinks) return false;
    return explainDroppedFeature(ctx, r, a, ev, logitsOnly, AttentionFeature::Sinks, SinkDroppedEvidence::finding);
  }
};

}  // namespace

const FailureRow& sinkDropped() {
  static const SinkDroppedRow row;
  return row;
}

}  // namespace kvscope::detail::rows
