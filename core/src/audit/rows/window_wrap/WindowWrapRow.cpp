// `window_wrap` (KV Scope's): a ring-buffer sliding-window cache whose slot map, once it
// wraps, loses a position the next query needs (or whose contents its map does not describe).
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/window_wrap/WindowWrapEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class WindowWrapRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::WindowWrap,
        "once a ring-buffer window cache wraps, its slot map loses a position the next query "
        "needs (on sliding layers only)",
        "the ring's slot arithmetic after the wrap (which slot an entry is written to and read "
        "from)",
        MatrixOrigin::KvScope,
        109,
        AuditStage::Positions,
        {},
        {"sliding-window caches off by one after the window wraps (the method's list of bugs "
         "seen in the wild; docs/audit.md)"},
        {{"window_wrap",
          "ring-buffer sliding-window caches (enabled if --ring-window is not given) that, in "
          "every forward after a layer's ring has wrapped (a decode step after a prompt longer "
          "than the window too), write each entry one slot back ((cache index - 1) mod slots): "
          "the entry overwritten is one the next query still needs, and the slot map says so",
          "a ring layer's slot map loses a needed position at the first wrapped step",
          {{"layer", "sliding layer affected (-1 = every sliding layer)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    if (a.ringLayer < 0 || ctx.hasFor(finding::WindowWrap, r)) return;  // the onset carries it
    ctx.add(windowWrapFinding(ctx.trace, a, ctx.analyses.at(r)), a);
  }

  // Stage 3: every recorded slot map against the positions fed (RingMapCheck).
  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions || in.trace.ringLayers().empty()) return;
    int64_t maps = 0;
    const RingMapProblem* problem = nullptr;
    for (const auto& [r, steps] : in.analyses)
      for (const auto& a : steps) {
        maps += a.ringMapsChecked;
        if (!problem && a.ringLayer >= 0) problem = &a.ringProblem;
      }
    if (in.fired)
      checks.push_back(problem && problem->kind == "checksum"
                           ? "FAIL: a ring cache's slots hold other values than the records its "
                             "slot map places there (the map itself holds the positions its "
                             "window needs)"
                           : "FAIL: a ring cache's slot map loses a position its window still "
                             "needs");
    else
      checks.push_back(maps > 0 ? "ok: every ring slot map holds the positions its window needs (" +
                                      std::to_string(maps) + " maps checked)"
                                : "not checked: ring slots: the trace declares ring layers but "
                                  "records no slot map (ring_positions)");
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "window_wrap",
                          "layer " + std::to_string(f.layer) + " ring loses position " +
                              numberText(f.evidence.count("missing_position")
                                             ? f.evidence.at("missing_position")
                                             : -1),
                          true};
  }
};

}  // namespace

const FailureRow& windowWrap() {
  static const WindowWrapRow row;
  return row;
}

}  // namespace kvscope::detail::rows
