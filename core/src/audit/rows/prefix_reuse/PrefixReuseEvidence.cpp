#include "audit/rows/prefix_reuse/PrefixReuseEvidence.hpp"

#include <algorithm>
#include <cmath>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {

// `layer`'s reused rows [from, to) against `ref`: the largest difference and the positions
// beyond the record tolerance.
struct SpanDiff {
  double worst = INFINITY;
  std::vector<int64_t> beyond;
};

SpanDiff spanAgainst(const TraceLayerRecord& rec, const RequestReference& ref, size_t layer,
                     int64_t from, int64_t to, const Tolerance& tol) {
  SpanDiff out;
  if (layer >= ref.keys.size() || to > ref.keys[layer].shape[1]) return out;
  out.worst = 0;
  for (int64_t c = from; c < to; ++c) {
    const auto [e, m] =
        kvColumnDiff(rec.keys, rec.values, c, ref.keys[layer], ref.values[layer], c);
    out.worst = std::max(out.worst, e);
    if (e > tol.forRecord(static_cast<int64_t>(layer), c, m)) out.beyond.push_back(c);
  }
  return out;
}

}  // namespace

FindingDraft prefixReuseFinding(const Trace& trace, ReferenceSet& refs, const Tolerance& tol,
                                int64_t request, const StepAnalysis& a) {
  const TraceStep& st = *a.step;
  const auto l = static_cast<size_t>(a.reusedBadLayer);
  const TraceLayerRecord& rec = st.layers[l];
  const int64_t from = a.reusedBadPosition, to = a.reused;
  const TraceRequest* own = trace.findRequest(request);
  const RequestReference* ownRef = own ? refs.get(request, a.version, own->stream()) : nullptr;
  const SpanDiff ownDiff = ownRef ? spanAgainst(rec, *ownRef, l, from, to, tol) : SpanDiff{};
  const double ownError = ownDiff.worst;
  const int64_t last = ownDiff.beyond.empty() ? from : ownDiff.beyond.back();
  // Which other request's reference the rows equal there (the declared source first).
  int64_t match = -1;
  double matchError = INFINITY;
  for (const TraceRequest& other : trace.requests) {
    if (other.id == request) continue;
    const RequestReference* ref = refs.get(other.id, a.version, other.stream());
    if (!ref) continue;
    const SpanDiff d = spanAgainst(rec, *ref, l, from, to, tol);
    const double err = d.worst;
    const bool within = d.beyond.empty();
    const bool declared = other.id == st.reusedFrom;
    if (within && (match < 0 || declared || (match != st.reusedFrom && err < matchError))) {
      match = other.id;
      matchError = err;
    }
  }
  std::map<std::string, double> ev{
      {"reused_count", static_cast<double>(a.reused)},
      {"reused_from", static_cast<double>(st.reusedFrom)},
      {"first_wrong_position", static_cast<double>(from)},
      {"wrong_rows", static_cast<double>(ownDiff.beyond.size())},
      {"last_wrong_position", static_cast<double>(last)},
      {"rows_right_before", static_cast<double>(from)},
      {"own_reference_error", ownError},
      {"layer_reused_error", a.reusedError[l]},
      {"fed_layer0_error", std::max(a.keyError.empty() ? 0.0 : a.keyError[0],
                                    a.valueError.empty() ? 0.0 : a.valueError[0])},
      {"reused_blocks", static_cast<double>(st.reusedBlocks.size())}};
  if (match >= 0) {
    ev["source_request"] = static_cast<double>(match);
    ev["source_reference_error"] = matchError;
  }
  const auto wrong = static_cast<int64_t>(ownDiff.beyond.size());
  const std::string span = wrong <= 1 ? "position " + std::to_string(from)
                                      : std::to_string(wrong) + " of positions " +
                                            std::to_string(from) + ".." + std::to_string(last);
  std::string ex =
      "request " + std::to_string(request) + "'s first " + std::to_string(a.reused) +
      " cache entries came from the prefix cache" +
      (st.reusedFrom >= 0 ? " (request " + std::to_string(st.reusedFrom) + "'s)" : "") +
      ": at layer " + std::to_string(l) + ", " +
      (from > 0 ? "entries 0.." + std::to_string(from - 1) + " equal its own reference, but "
                : std::string()) +
      span + (wrong <= 1 ? " differs" : " differ") + " from it (max " + numberText(ownError) + ")";
  ex += match >= 0
            ? std::string(wrong <= 1 ? " and equals" : " and equal") + " request " +
                  std::to_string(match) + "'s reference there (max diff " + numberText(matchError) +
                  "): the hit handed over rows computed for another prompt"
            : std::string(wrong <= 1 ? " and matches" : " and match") +
                  " no other request's reference: the hit handed over rows that "
                  "were not this prompt's (a block not yet written, or another prompt's)";
  ex += "; the rows the step computed itself are right at layer 0 (max diff " +
        numberText(ev["fed_layer0_error"]) + ")";
  return FindingDraft(finding::PrefixReuse)
      .at(st)
      .layer(a.reusedBadLayer)
      .position(from)
      .confidence(match >= 0 ? 0.95 : 0.7)
      .explanation(ex)
      .evidence(ev);
}

}  // namespace kvscope::detail
