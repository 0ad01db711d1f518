// `stale_cache` (the method's row 7): a forward with new weights over a cache of K/V
// computed with older ones (no reset after a weight update).
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class StaleCacheRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::StaleCache,
        "cache works until the weights update",
        "stale projected K/V",
        MatrixOrigin::Method,
        7,
        AuditStage::Positions,
        {},
        {"KV kept across an RL weight refit (the method's list of bugs seen in the wild)"},
        {{"stale_cache",
          "the weights are updated at tick `tick` but the cache built with the old weights is "
          "kept",
          "cache works until the weights update",
          {{"tick", "engine tick of the weight update", "3"},
           {"layer", "layer whose k_proj is updated", "0"},
           {"scale", "update size in percent of the tensor's std", "50"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t, const StepAnalysis& a) const override {
    if (!a.staleOnset) return;
    Evidence ev{{"weights_version", static_cast<double>(a.version)},
                {"cache_weights_version", static_cast<double>(a.oldestVersion)},
                {"max_logit_error", a.logitError}};
    std::string ex = "the forward used weights version " + std::to_string(a.version) +
                     " while the cache still holds K/V computed with version " +
                     std::to_string(a.oldestVersion) + " (no cache reset after the weight update)";
    if (a.staleValuesChecked) {
      ev["reused_rows"] = static_cast<double>(a.reusedRows);
      ev["reused_vs_old_weights"] = a.reusedVsOld;
      ev["reused_vs_new_weights"] = a.reusedVsNew;
      ev["fresh_vs_new_weights"] = a.freshVsNew;
      ev["tolerance"] = a.staleTolerance;
      ex += "; the " + std::to_string(a.reusedRows) + " reused rows equal the version-" +
            std::to_string(a.oldestVersion) + " projections (max diff " +
            numberText(a.reusedVsOld) + ") and differ from the version-" +
            std::to_string(a.version) + " ones (" + numberText(a.reusedVsNew) +
            "), while this step's fresh layer-0 rows equal the version-" +
            std::to_string(a.version) + " projections (" + numberText(a.freshVsNew) + ")";
    } else {
      ex += "; values not checked: " + a.staleNotChecked;
    }
    if (a.logitsCompared)
      ex += "; logits differ from the version-" + std::to_string(a.version) + " reference by " +
            numberText(a.logitError);
    const bool valuesAgree = a.staleValuesChecked && a.reusedVsOld <= a.staleTolerance &&
                             a.freshVsNew <= a.staleTolerance && a.reusedVsNew > a.staleTolerance;
    ctx.add(FindingDraft(finding::StaleCache)
                .at(*a.step)
                .position(a.cacheRealBefore)
                .confidence(valuesAgree ? 0.99 : 0.9)
                .explanation(ex)
                .evidence(ev),
            a);
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions) return;
    checks.push_back(in.fired ? "FAIL: a cache built under other weights is reused"
                              : "ok: no cache built under other weights is reused");
  }
};

}  // namespace

const FailureRow& staleCache() {
  static const StaleCacheRow row;
  return row;
}

}  // namespace kvscope::detail::rows
