// `chunk_position` (KV Scope's): a chunked prefill whose later chunks take positions that do
// not continue from the cache (restarting at 0, or rotated at chunk-local positions).
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/chunk_position/ChunkPositionEvidence.hpp"

namespace kvscope::detail::rows {
namespace {

class ChunkPositionRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::ChunkPosition,
        "first chunk exact; from a chunk boundary on, layer-0 keys equal the same tokens' at "
        "other positions",
        "the position ids of each prefill chunk (they must continue from the cache's length)",
        MatrixOrigin::KvScope,
        106,
        AuditStage::Positions,
        {},
        {"chunked prefill computing positions per chunk (docs/audit.md)"},
        {{"chunk_position",
          "chunked prefill (`size` tokens per chunk, enabled if --prefill-chunk is not given) "
          "whose positions restart at 0 at every chunk boundary from chunk `chunk` on "
          "(positions computed per chunk): with layer=-1 the chunk's position ids (fed and "
          "recorded) restart; with layer=L (RoPE models only) the recorded ids are right and "
          "layer L's queries and keys are rotated at the chunk-local positions; gpt2 takes "
          "positions once, at its input (learned position embeddings), so it takes layer=-1 "
          "only",
          "from a chunk boundary on, layer-0 keys equal the same tokens' at other positions",
          {{"chunk", "first chunk affected (1 = the second chunk; chunk 0 is always right)", "1"},
           {"size", "prompt tokens per chunk (when --prefill-chunk is not given)", "4"},
           {"layer",
            "layer rotated at the wrong positions (-1 = all: the position ids themselves)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  // Recorded position ids that restart at a chunk boundary: this row's, not `position`'s.
  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    if (!a.positionsOk && explain(ctx, r, a, /*fromValues=*/false)) ctx.claimPositions(a);
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference&, const Evidence&) const override {
    return explain(ctx, r, a, /*fromValues=*/true);
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage == AuditStage::Positions && in.fired)
      checks.push_back("FAIL: a prefill chunk's positions do not continue from the cache");
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    auto ev = [&](const char* key) { return f.evidence.count(key) ? f.evidence.at(key) : 0.0; };
    return TimelineMarker{f.step, "chunk_position",
                          f.layer > 0 || f.evidence.count("hypothesis")
                              ? "layer " + std::to_string(f.layer) + " at chunk-local positions"
                              : "chunk " + numberText(ev("chunk")) + " positions from " +
                                    numberText(ev("recorded_position")),
                          true};
  }

 private:
  /// `a`, a chunk after the first of a chunked prefill, from its recorded positions or
  /// (`fromValues`) its records; true when `a` is explained (a later chunk of a prefill
  /// already found wrong is its consequence).
  static bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, bool fromValues) {
    const TraceRequest* req = ctx.trace.findRequest(r);
    if (!req) return false;
    const auto chunk = ChunkPositionEvidence::boundaryAt(
        ctx.analyses.at(r), a, static_cast<int64_t>(req->promptIds.size()));
    if (!chunk) return false;
    if (ctx.hasFor(finding::ChunkPosition, r)) return true;  // the boundary carries the evidence
    const ChunkPositionEvidence evidence(ctx.trace, ctx.refs, ctx.tol);
    auto draft =
        fromValues ? evidence.fromValues(*chunk) : evidence.fromRecordedPositions(*chunk);
    if (draft) ctx.add(*draft, a);
    return draft.has_value();
  }
};

}  // namespace

const FailureRow& chunkPosition() {
  static const ChunkPositionRow row;
  return row;
}

}  // namespace kvscope::detail::rows
