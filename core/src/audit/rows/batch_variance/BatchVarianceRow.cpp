// `batch_variance` (KV Scope's): a request that runs batched and no longer reproduces its
// solo run bit for bit, with no structural or cache-row evidence (batch-variant kernels).
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/batch_variance/BatchVarianceCheck.hpp"

namespace kvscope::detail::rows {
namespace {

class BatchVarianceRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::BatchVariance,
        "a request's logits differ from its solo run at float noise once it runs batched, with "
        "no structural or cache-row evidence",
        "the batch-invariance of the kernels (reductions whose split or order depends on the "
        "batch size)",
        MatrixOrigin::KvScope,
        107,
        AuditStage::Numerics,
        {},
        {"GEMM heuristics that choose split-K by batch size (docs/audit.md)"},
        {{"batch_variance",
          "batch-invariant batching (enabled if --batch-invariant is not given; needs --batch) "
          "whose q/k/v projections of `layer` (-1 = every layer) switch, from step `step` on, "
          "to a split-K reduction with as many parts as the batch has members, as GEMM "
          "heuristics choose split-K by batch size: a request's records and logits then differ "
          "from its solo run at float noise",
          "logits differ from the solo run at float noise with no cache-row evidence",
          {{"step", "first step affected (0 = prefill)", "1"},
           {"layer", "layer affected (-1 = all)", "0"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        "logits within tolerance, but a batched request differs from its solo run "
        "(batch_variance)",
        true};
    return s;
  }

  std::vector<std::string> paired(const PairedRuns& runs, FindingBuilder& findings,
                                  std::set<int64_t>& explained) const override {
    BatchVarianceCheck batch(runs.audited, runs.reference);
    auto lines = batch.run(runs.analyses, findings);
    explained.insert(batch.explained().begin(), batch.explained().end());
    return lines;
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "batch_variance",
                          "differs from its solo run" +
                              (f.layer >= 0 ? " from layer " + std::to_string(f.layer)
                                            : std::string()),
                          true};
  }
};

}  // namespace

const FailureRow& batchVariance() {
  static const BatchVarianceRow row;
  return row;
}

}  // namespace kvscope::detail::rows
