#include "audit/rows/chunk_position/ChunkPositionEvidence.hpp"

#include <algorithm>
#include <string>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

namespace {
// Whether every real entry the step fed is a prompt token of the request's stream.
bool feedsPrompt(const StepAnalysis& a, int64_t promptLength) {
  bool any = false;
  for (const int64_t p : a.streamIndex) {
    if (p < 0) continue;
    if (p >= promptLength) return false;
    any = true;
  }
  return any;
}

std::string span(int64_t first, int64_t count) {
  return std::to_string(first) + ".." + std::to_string(first + count - 1);
}
}  // namespace

std::optional<ChunkBoundary> ChunkPositionEvidence::boundaryAt(
    const std::vector<StepAnalysis>& steps, const StepAnalysis& a, int64_t promptLength) {
  // The prefill of the cache `a` belongs to: the steps from its start (or last reset) that
  // feed prompt tokens, up to the one that chooses the first token.
  ChunkBoundary b;
  bool open = false, found = false;
  for (const auto& s : steps) {
    if (&s == &steps.front() || s.step->resetsCache()) {
      b.chunks.clear();
      open = true;
    }
    const bool chunk = open && feedsPrompt(s, promptLength);
    if (chunk) b.chunks.push_back(&s);
    open = chunk && s.step->chosenToken < 0;
    if (&s == &a) {
      if (!chunk) return std::nullopt;
      found = true;
    }
    if (found && !open) break;
  }
  const auto at = std::find(b.chunks.begin(), b.chunks.end(), &a);
  if (b.chunks.size() < 2 || at == b.chunks.end() || at == b.chunks.begin()) return std::nullopt;
  b.chunk = static_cast<size_t>(at - b.chunks.begin());
  b.start = a.cacheRealBefore;
  b.length = static_cast<int64_t>(a.step->realColumns().size());
  return b;
}

std::vector<int64_t> ChunkPositionEvidence::promptOf(const ChunkBoundary& b) const {
  const TraceRequest* req = trace_.findRequest(b.chunks.front()->step->request);
  if (!req) return {};
  std::vector<int64_t> ids = req->stream();
  const int64_t end = b.chunks.back()->cacheRealBefore +
                      static_cast<int64_t>(b.chunks.back()->step->realColumns().size());
  if (end > static_cast<int64_t>(ids.size())) return {};
  ids.resize(static_cast<size_t>(end));
  return ids;
}

std::map<std::string, double> ChunkPositionEvidence::common(const ChunkBoundary& b) const {
  const StepAnalysis& a = *b.chunks[b.chunk];
  double before = 0;
  bool exact = true;
  for (size_t k = 0; k < b.chunk; ++k) {
    const StepAnalysis& c = *b.chunks[k];
    exact = exact && c.positionsOk && c.firstBadLayer < 0;
    for (size_t l = 0; l < c.keyError.size(); ++l)
      before = std::max({before, c.keyError[l], c.valueError[l]});
  }
  return {{"chunk", static_cast<double>(b.chunk)},
          {"chunks", static_cast<double>(b.chunks.size())},
          {"chunk_start", static_cast<double>(b.start)},
          {"chunk_length", static_cast<double>(b.length)},
          {"earlier_chunks_exact", exact ? 1.0 : 0.0},
          {"earlier_chunks_max_error", before},
          {"max_logit_error", a.logitError}};
}

std::optional<ChunkPositionEvidence::Hypothesis> ChunkPositionEvidence::test(
    const ChunkBoundary& b, const std::vector<int64_t>& positions,
    const std::map<int64_t, std::vector<int64_t>>& layerPositions) const {
  const std::vector<int64_t> ids = promptOf(b);
  if (ids.empty() || ids.size() != positions.size()) return std::nullopt;
  const StepAnalysis& a = *b.chunks[b.chunk];
  auto run = refs_.positioned(ids, positions, layerPositions, a.version);
  if (!run) return std::nullopt;
  Hypothesis h;
  bool within = true;
  for (size_t k = b.chunk; k < b.chunks.size(); ++k) {
    const StepAnalysis& c = *b.chunks[k];
    for (size_t l = 0; l < c.step->layers.size() && l < run->keys.size(); ++l) {
      const TraceLayerRecord& rec = c.step->layers[l];
      if (!trace_.holdsRows(static_cast<int64_t>(l)) || rec.keys.shape.size() != 3) continue;
      for (size_t j = 0; j < c.streamIndex.size(); ++j) {
        const int64_t p = c.streamIndex[j];
        if (p < 0 || static_cast<int64_t>(j) >= rec.keys.shape[1]) continue;
        const ColumnDiff dk = columnDiff(rec.keys, static_cast<int64_t>(j), run->keys[l], p);
        const ColumnDiff dv = columnDiff(rec.values, static_cast<int64_t>(j), run->values[l], p);
        const double t = tol_.forRecord(static_cast<int64_t>(l), p, std::max(dk.mag, dv.mag));
        within = within && dk.err <= t && dv.err <= t;
        h.error = std::max({h.error, dk.err, dv.err});
        h.tolerance = std::max(h.tolerance, t);
        if (l == 0) {
          h.layer0Key = std::max(h.layer0Key, dk.err);
          h.layer0Value = std::max(h.layer0Value, dv.err);
        }
      }
    }
  }
  if (!within) h.tolerance = -h.tolerance;  // negative: the records leave the hypothesis
  return h;
}

std::optional<FindingDraft> ChunkPositionEvidence::fromRecordedPositions(
    const ChunkBoundary& b) const {
  const StepAnalysis& a = *b.chunks[b.chunk];
  if (a.positionsOk || a.expectedPosition != b.start) return std::nullopt;
  for (size_t k = 0; k < b.chunk; ++k)
    if (!b.chunks[k]->positionsOk) return std::nullopt;  // the onset is before the boundary
  std::map<std::string, double> ev = common(b);
  ev["offset"] = static_cast<double>(a.positionOffset);
  ev["expected_position"] = static_cast<double>(a.expectedPosition);
  ev["recorded_position"] = static_cast<double>(a.recordedPosition);
  ev["restarted"] = a.recordedPosition == 0 ? 1.0 : 0.0;
  ev["layer0_key_error"] = a.keyError.empty() ? 0.0 : a.keyError[0];
  ev["layer0_value_error"] = a.valueError.empty() ? 0.0 : a.valueError[0];
  std::string ex = "the prefill ran in " + std::to_string(b.chunks.size()) + " chunks; chunk " +
                   std::to_string(b.chunk) + " (stream positions " + span(b.start, b.length) +
                   ") recorded position ids from " + std::to_string(a.recordedPosition) +
                   " instead of " + std::to_string(b.start) + " (offset " +
                   std::to_string(a.positionOffset) +
                   (a.recordedPosition == 0 ? ": the positions restart at 0 at the chunk boundary"
                                            : ": the positions jump at the chunk boundary") +
                   ")";
  ex += ev["earlier_chunks_exact"] > 0 ? "; the chunks before it are exact"
                                       : "; the chunks before it differ too (max diff " +
                                             numberText(ev["earlier_chunks_max_error"]) + ")";
  // The records against an uncached pass at the recorded positions.
  std::vector<int64_t> positions;
  for (const StepAnalysis* c : b.chunks)
    for (const int64_t j : c->step->realColumns())
      positions.push_back(c->step->positions[static_cast<size_t>(j)]);
  double confidence = 0.9;
  if (auto h = test(b, positions, {})) {
    const bool match = h->tolerance >= 0;
    ev["records_vs_chunk_positions"] = h->error;
    ev["tolerance"] = std::abs(h->tolerance);
    ev["layer0_key_vs_chunk_positions"] = h->layer0Key;
    ev["layer0_value_vs_chunk_positions"] = h->layer0Value;
    const bool valuesExact = a.valueError.empty() || a.valueError[0] <= a.valueTol[0];
    ex += std::string("; ") +
          (match ? "every record from the boundary on equals an uncached pass at the recorded "
                   "positions"
                 : "the records from the boundary on do not all equal an uncached pass at the "
                   "recorded positions") +
          " (max diff " + numberText(h->error) +
          "): layer 0's keys are the reference keys of the "
          "same tokens at those positions (max diff " +
          numberText(h->layer0Key) + "), not at the right ones (" +
          numberText(ev["layer0_key_error"]) + ")" +
          (valuesExact ? ", while layer 0's values match the right positions (" +
                             numberText(ev["layer0_value_error"]) + "; RoPE rotates keys only)"
                       : "; layer 0's values differ too (" + numberText(ev["layer0_value_error"]) +
                             ": the position enters the hidden state, as a learned position "
                             "embedding does) and equal those at the recorded positions (" +
                             numberText(h->layer0Value) + ")");
    confidence = match ? 0.99 : 0.8;
  } else {
    ex +=
        "; the records were not compared with a pass at those positions (no model: "
        "trace+trace mode)";
  }
  if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
  return FindingDraft(finding::ChunkPosition)
      .at(*a.step)
      .layer(0)
      .position(b.start)
      .confidence(confidence)
      .explanation(ex)
      .evidence(ev);
}

std::optional<FindingDraft> ChunkPositionEvidence::fromValues(const ChunkBoundary& b) const {
  const StepAnalysis& a = *b.chunks[b.chunk];
  const int L = a.firstBadLayer;
  if (!a.positionsOk || L < 0 || a.firstBadStreamIndex != b.start || !refs_.hasModel())
    return std::nullopt;
  const auto l = static_cast<size_t>(L);
  if (a.valueError[l] > a.valueTol[l]) return std::nullopt;  // RoPE moves keys, not values
  std::vector<int64_t> right, local;
  for (size_t k = 0; k < b.chunks.size(); ++k) {
    const StepAnalysis& c = *b.chunks[k];
    const auto real = c.step->realColumns();
    for (size_t j = 0; j < real.size(); ++j) {
      right.push_back(c.step->positions[static_cast<size_t>(real[j])]);
      local.push_back(k >= b.chunk ? static_cast<int64_t>(j) : right.back());
    }
  }
  // The layer alone, then it and every layer above it.
  for (const int64_t top : {static_cast<int64_t>(L), trace_.model.numLayers - 1}) {
    std::map<int64_t, std::vector<int64_t>> layers;
    for (int64_t x = L; x <= top; ++x) layers[x] = local;
    auto h = test(b, right, layers);
    if (!h || h->tolerance < 0) {
      if (top == L && L == trace_.model.numLayers - 1) break;
      continue;
    }
    std::map<std::string, double> ev = common(b);
    ev["hypothesis"] = top == L ? 1.0 : 2.0;
    ev["records_vs_chunk_positions"] = h->error;
    ev["tolerance"] = h->tolerance;
    ev["layer_key_error"] = a.keyError[l];
    ev["layer_value_error"] = a.valueError[l];
    ev["layer0_value_error"] = a.valueError[0];
    ev["offset"] = static_cast<double>(-b.start);
    ev["restarted"] = 1.0;
    const std::string which = top == L ? "layer " + std::to_string(L)
                                       : "layers " + std::to_string(L) + ".." + std::to_string(top);
    std::string ex =
        "the prefill ran in " + std::to_string(b.chunks.size()) +
        " chunks and the recorded "
        "position ids continue, but from chunk " +
        std::to_string(b.chunk) + " (stream position " + std::to_string(b.start) + ") on " + which +
        " rotated the queries and keys at positions restarting at 0 in every chunk: layer " +
        std::to_string(L) + "'s keys differ from the reference (max diff " +
        numberText(a.keyError[l]) + ") while its values match (" + numberText(a.valueError[l]) +
        "), and every record from the boundary on equals an uncached pass with " + which +
        " at the chunk-local positions (max diff " + numberText(h->error) + ", tolerance " +
        numberText(h->tolerance) + ")";
    ex += ev["earlier_chunks_exact"] > 0 ? "; the chunks before it are exact" : "";
    if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
    return FindingDraft(finding::ChunkPosition)
        .at(*a.step)
        .layer(L)
        .position(b.start)
        .confidence(0.97)
        .explanation(ex)
        .evidence(ev);
  }
  return std::nullopt;
}

}  // namespace kvscope::detail
