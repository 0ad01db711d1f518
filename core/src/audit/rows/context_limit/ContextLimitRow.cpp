// `context_limit` (the method's row 8): a position beyond the model's context was fed (the
// engine must refuse before the position row is read).
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class ContextLimitRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{finding::ContextLimit,
                           "a generated token cannot be fed back",
                           "context limit reached",
                           MatrixOrigin::Method,
                           8,
                           AuditStage::Positions,
                           {},
                           {},
                           {},
                           {},
                           true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t, const StepAnalysis& a) const override {
    if (!a.beyondContext) return;
    ctx.add(FindingDraft(finding::ContextLimit)
                .at(*a.step)
                .position(a.beyondPosition)
                .confidence(1.0)
                .explanation("position " + std::to_string(a.beyondPosition) +
                             " was used but the model has " +
                             std::to_string(ctx.trace.model.maxPositions) +
                             " positions: the token could not be fed back")
                .evidence({{"position", static_cast<double>(a.beyondPosition)},
                           {"max_positions", static_cast<double>(ctx.trace.model.maxPositions)}}),
            a);
  }

  // Stage 6: positions beyond the context that were fed anyway.
  std::optional<Finding> stopping(const Trace& trace, const TraceRequest& req,
                                  std::ostringstream& line, bool& ok) const override {
    if (trace.model.maxPositions <= 0) return std::nullopt;
    for (const TraceStep* s : trace.stepsOf(req.id))
      for (int64_t p : s->positions)
        if (p >= trace.model.maxPositions) {
          ok = false;
          line << "; step " << s->step << " fed position " << p << " beyond the "
               << trace.model.maxPositions << "-position context";
          return FindingDraft(finding::ContextLimit)
              .request(req.id)
              .step(s->step)
              .position(p)
              .confidence(1.0)
              .explanation("a token was fed at position " + std::to_string(p) +
                           " but the model has only " + std::to_string(trace.model.maxPositions) +
                           " position rows: the engine must refuse before the lookup")
              .evidence({{"position", static_cast<double>(p)},
                         {"max_positions", static_cast<double>(trace.model.maxPositions)}})
              .finish();
        }
    return std::nullopt;
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions) return;
    checks.push_back(in.fired ? "FAIL: a position beyond the context was needed"
                              : "ok: no position beyond the context was read");
  }
};

}  // namespace

const FailureRow& contextLimit() {
  static const ContextLimitRow row;
  return row;
}

}  // namespace kvscope::detail::rows
