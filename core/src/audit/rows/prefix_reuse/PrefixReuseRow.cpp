// `prefix_reuse` (KV Scope's): a prefix-cache hit that hands a request rows computed for
// another prompt.
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/prefix_reuse/PrefixReuseEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class PrefixReuseRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::PrefixReuse,
        "a prefix-cache hit's reused rows equal another request's reference inside the hit span "
        "while the rows outside it are right",
        "the prefix cache's block key and lookup (hash collision, partial block match, a block "
        "entered before it was written)",
        MatrixOrigin::KvScope,
        108,
        AuditStage::Positions,
        {},
        {"prefix-cache blocks read by another request before they were written (the method's "
         "list of bugs seen in the wild; docs/audit.md)"},
        {{"prefix_reuse",
          "prefix caching (enabled with `block` if --prefix-cache is not given) whose block "
          "lookup compares a block without its last token (a hash over too few tokens), so a "
          "prompt that differs from an earlier one only there is handed that prompt's block: "
          "rows computed for another token, which the rest of the prefill attends over; with "
          "layer=L only layer L's rows come from that block (a per-layer block table), the "
          "others are computed",
          "the reused rows equal another request's reference from the block's last token on",
          {{"layer", "layer handed the wrong block (-1 = every layer)", "-1"},
           {"block", "prefix-cache block size in tokens, when --prefix-cache is not given", "4"},
           {"request", "request whose lookup is wrong (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    if (a.reusedBadLayer >= 0) ctx.add(prefixReuseFinding(ctx.trace, ctx.refs, ctx.tol, r, a), a);
  }

  // Stage 3: the rows each hit handed over against the request's own reference.
  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions) return;
    int64_t hits = 0, rows = 0;
    for (const auto& [r, steps] : in.analyses)
      for (const auto& a : steps) {
        hits += a.reused > 0 ? 1 : 0;
        rows += a.reused;
      }
    if (hits == 0) return;
    checks.push_back(in.fired ? "FAIL: a prefix-cache hit handed a request rows computed for "
                                "another prompt"
                              : "ok: " + std::to_string(hits) + " prefix-cache hit(s) handed over " +
                                    std::to_string(rows) +
                                    " entries equal to the request's own reference");
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "prefix_reuse",
                          "reused rows wrong from position " + std::to_string(f.position), true};
  }
};

}  // namespace

const FailureRow& prefixReuse() {
  static const PrefixReuseRow row;
  return row;
}

}  // namespace kvscope::detail::rows
