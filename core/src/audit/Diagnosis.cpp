#include "audit/Diagnosis.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "audit/ChunkPositionEvidence.hpp"
#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "audit/PrefixReuseEvidence.hpp"
#include "audit/QuantizationEvidence.hpp"
#include "audit/RequestWalk.hpp"
#include "audit/RewriteOrigin.hpp"
#include "audit/RopeScalingEvidence.hpp"
#include "audit/SignatureSearch.hpp"
#include "audit/WindowWrapEvidence.hpp"

namespace kvscope::detail {

int64_t Diagnosis::interleavedRequest(int64_t request, const StepAnalysis& a) const {
  auto prev = previousTick_.find(request);
  const int64_t from = prev == previousTick_.end() ? -1 : prev->second;
  for (const auto& s : trace_.steps)
    if (s.request != request && s.tick > from && s.tick <= a.step->tick) return s.request;
  return -1;
}

int64_t Diagnosis::slotSharer(int64_t request, int64_t slot, int64_t upToTick) const {
  for (const auto& s : trace_.steps)
    if (s.request != request && s.slot == slot && s.tick <= upToTick) return s.request;
  return -1;
}

void Diagnosis::rewritten(int64_t r, const StepAnalysis& a, FindingBuilder& f) {
  const TraceStep& st = *a.step;
  const auto l = a.rewrittenLayer;
  const TraceRequest* req = trace_.findRequest(r);
  const RequestReference* own = req ? refs_.get(r, a.version, req->stream()) : nullptr;
  const std::string rows = a.rewrittenColumns.empty()
                               ? std::string()
                               : "entries " + std::to_string(a.rewrittenColumns.front()) + ".." +
                                     std::to_string(a.rewrittenColumns.back());
  if (own) {
    if (auto m = RewriteOrigin(tol_, references_).explain(r, a, *own)) {
      std::map<std::string, double> ev{
          {"rewritten_entries", static_cast<double>(a.rewrittenColumns.size())},
          {"rows_compared", static_cast<double>(m->rows)},
          {"match_error", m->error},
          {"own_reference_error", m->ownError},
          {"max_logit_error", a.logitError}};
      if (m->kind == finding::WrongLayer) {
        ev["source_layer"] = static_cast<double>(m->sourceLayer);
        f.add(FindingDraft(finding::WrongLayer)
                  .at(st)
                  .layer(l)
                  .confidence(0.97)
                  .explanation(
                      "layer " + std::to_string(l) +
                      "'s whole cache was replaced at this step: its " + rows +
                      " (earlier rows included) equal layer " + std::to_string(m->sourceLayer) +
                      "'s reference projections at the same positions (max diff " +
                      numberText(m->error) + ") instead of its own (max diff " +
                      numberText(m->ownError) + "); the cache length stayed right. Layer " +
                      std::to_string(l) + " stores and reads layer " +
                      std::to_string(m->sourceLayer) + "'s K/V")
                  .evidence(ev));
      } else {
        ev["other_request"] = static_cast<double>(m->otherRequest);
        ev["other_layer"] = static_cast<double>(m->sourceLayer);
        f.add(FindingDraft(finding::CrossRequest)
                  .at(st)
                  .layer(l)
                  .confidence(0.97)
                  .explanation("layer " + std::to_string(l) + "'s " + rows +
                               " were overwritten since the previous step: they equal request " +
                               std::to_string(m->otherRequest) + "'s reference" +
                               (m->sourceLayer != l ? " of layer " + std::to_string(m->sourceLayer)
                                                    : std::string()) +
                               " at the same positions (max diff " + numberText(m->error) +
                               ", own reference " + numberText(m->ownError) +
                               "): another request was written into this request's cache" +
                               (a.logitsCompared
                                    ? "; this request's logits moved by " + numberText(a.logitError)
                                    : std::string()))
                  .evidence(ev));
      }
      return;
    }
  }
  const int64_t other = interleavedRequest(r, a);
  const int64_t sharer = slotSharer(r, st.slot, st.tick);
  std::map<std::string, double> ev{{"layer", static_cast<double>(l)},
                                   {"slot", static_cast<double>(st.slot)}};
  std::string ex = "earlier cache rows of layer " + std::to_string(l) +
                   " changed since the previous step (the recorded cache no longer matches the "
                   "appended records)";
  if (!a.rewrittenColumns.empty()) {
    ex += "; snapshot " + rows + " differ and match no other layer's or request's reference";
    ev["rewritten_entries"] = static_cast<double>(a.rewrittenColumns.size());
  }
  if (sharer >= 0) {
    ex += "; request " + std::to_string(sharer) + " used the same cache row (slot " +
          std::to_string(st.slot) + ")";
    ev["other_request"] = static_cast<double>(sharer);
  } else if (other >= 0) {
    ex += "; request " + std::to_string(other) + " ran in between";
    ev["other_request"] = static_cast<double>(other);
  }
  if (a.logitsCompared) {
    ex += "; this request's logits moved by " + numberText(a.logitError);
    ev["max_logit_error"] = a.logitError;
  }
  f.add(FindingDraft(finding::CrossRequest)
            .at(st)
            .layer(l)
            .confidence(sharer >= 0  ? 0.9
                        : other >= 0 ? 0.8
                                     : 0.5)
            .explanation(ex)
            .evidence(ev));
}

void Diagnosis::speculativeRollback(int64_t r, const StepAnalysis& a, FindingBuilder& f) {
  if (f.hasFor(finding::SpeculativeRollback, r)) return;  // the onset carries the evidence
  const TraceStep& st = *a.step;
  const auto l = static_cast<size_t>(a.rollbackLayer);
  const auto fed = static_cast<int64_t>(st.fedIds.size());
  const int64_t firstRejected = fed - a.rejected;  // fed entry of the first rejected draft
  // Stream position right after the last accepted token: where the first rejected draft sat.
  const int64_t at = a.cacheRealBefore + static_cast<int64_t>(st.realColumns().size());
  std::map<std::string, double> ev{
      {"draft_tokens", static_cast<double>(st.draftCount)},
      {"accepted", static_cast<double>(st.acceptedCount)},
      {"rejected", static_cast<double>(a.rejected)},
      {"cache_length_before", static_cast<double>(a.lengthBefore[l])},
      {"cache_length_after", static_cast<double>(a.lengthAfter[l])},
      {"expected_cache_length", static_cast<double>(a.lengthBefore[l] + fed - a.rejected)},
      {"extra_rows",
       static_cast<double>(a.lengthAfter[l] - (a.lengthBefore[l] + fed - a.rejected))},
      {"first_rejected_position", static_cast<double>(at)},
      {"layers_not_rolled_back", static_cast<double>(a.rollbackLayers.size())}};
  std::string layers;
  for (int x : a.rollbackLayers) layers += (layers.empty() ? "" : ", ") + std::to_string(x);
  std::string ex = "the step verified " + std::to_string(st.draftCount) +
                   " draft token(s) and accepted " + std::to_string(st.acceptedCount) +
                   ", but layer " + std::to_string(l) + "'s cache length went from " +
                   std::to_string(a.lengthBefore[l]) + " to " + std::to_string(a.lengthAfter[l]) +
                   " instead of " + std::to_string(a.lengthBefore[l] + fed - a.rejected) +
                   ": the " + std::to_string(a.rejected) +
                   " rejected draft(s) were not rolled back (layers " + layers + ")";
  // Whose rows are the extra ones? The rejected drafts' own projections at those positions,
  // from an uncached pass over the accepted stream followed by the rejected drafts.
  double vsDraft = 0, vsStream = 0, tolerance = 0;
  bool checked = false, streamCompared = false;
  const TraceRequest* req = trace_.findRequest(r);
  const TraceLayerRecord& rec = st.layers[l];
  if (req && rec.keys.shape.size() == 3 && rec.keys.shape[1] >= fed) {
    const std::vector<int64_t> stream = req->stream();
    std::vector<int64_t> ids(
        stream.begin(),
        stream.begin() + std::min<int64_t>(at, static_cast<int64_t>(stream.size())));
    ids.insert(ids.end(), st.fedIds.begin() + firstRejected, st.fedIds.end());
    if (static_cast<int64_t>(ids.size()) == at + a.rejected) {
      if (auto run = refs_.branch(ids, a.version)) {
        const RequestReference* own = refs_.get(r, a.version, stream);
        for (int64_t j = 0; j < a.rejected; ++j) {
          const int64_t col = firstRejected + j, p = at + j;
          for (int kind = 0; kind < 2; ++kind) {
            const FloatTensor& mine = kind ? rec.values : rec.keys;
            const FloatTensor& draft = kind ? run->values[l] : run->keys[l];
            const FloatTensor* next =
                own && own->keys.size() > l ? (kind ? &own->values[l] : &own->keys[l]) : nullptr;
            const bool inStream = next && p < next->shape[1];
            const ColumnDiff vs = columnDiff(mine, col, draft, p);
            vsDraft = std::max(vsDraft, vs.err);
            if (inStream) vsStream = std::max(vsStream, columnDiff(mine, col, *next, p).err);
            streamCompared = streamCompared || inStream;
            tolerance = std::max(tolerance, tol_.forRecord(static_cast<int64_t>(l), p, vs.mag));
          }
        }
        checked = true;
      }
    }
  }
  if (checked) {
    ev["extra_rows_vs_draft_projection"] = vsDraft;
    ev["tolerance"] = tolerance;
    ex += "; the extra rows equal the rejected drafts' projections at positions " +
          std::to_string(at) + ".." + std::to_string(at + a.rejected - 1) + " (max diff " +
          numberText(vsDraft) + ")";
    if (streamCompared) {
      ev["extra_rows_vs_stream_reference"] = vsStream;
      ex += ", not the stream's tokens there (" + numberText(vsStream) + ")";
    }
  } else {
    ex +=
        "; their values were not compared with the drafts' projections (no model: trace+trace "
        "mode)";
  }
  ex += "; later steps attend over them";
  const bool valuesAgree = checked && vsDraft <= tolerance;
  f.add(FindingDraft(finding::SpeculativeRollback)
            .at(st)
            .layer(a.rollbackLayer)
            .position(at)
            .confidence(valuesAgree ? 0.99 : 0.9)
            .explanation(ex)
            .evidence(ev));
}

bool Diagnosis::chunkPosition(int64_t r, const StepAnalysis& a, FindingBuilder& f,
                              bool fromValues) {
  const TraceRequest* req = trace_.findRequest(r);
  if (!req) return false;
  const auto chunk = ChunkPositionEvidence::boundaryAt(analyses_.at(r), a,
                                                       static_cast<int64_t>(req->promptIds.size()));
  if (!chunk) return false;
  if (f.hasFor(finding::ChunkPosition, r)) return true;  // the boundary carries the evidence
  const ChunkPositionEvidence evidence(trace_, refs_, tol_);
  auto draft = fromValues ? evidence.fromValues(*chunk) : evidence.fromRecordedPositions(*chunk);
  if (draft) f.add(*draft);
  return draft.has_value();
}

void Diagnosis::structural(int64_t r, const StepAnalysis& a, FindingBuilder& f) {
  const TraceStep& st = *a.step;
  if (a.rollbackLayer >= 0) speculativeRollback(r, a, f);
  if (a.ringLayer >= 0 && !f.hasFor(finding::WindowWrap, r))  // the onset carries the evidence
    f.add(windowWrapFinding(trace_, a, analyses_.at(r)));
  if (a.reusedBadLayer >= 0) f.add(prefixReuseFinding(trace_, refs_, tol_, r, a));
  if (a.duplicatedPrevious) {
    f.add(FindingDraft(finding::DuplicateAppend)
              .at(st)
              .position(a.cacheRealBefore)
              .confidence(0.95)
              .explanation("the step fed " + std::to_string(st.fedIds.size()) +
                           " tokens where the stream continues with " +
                           std::to_string(st.fedIds.size() - 1) + ": the previous token (" +
                           std::to_string(st.fedIds.front()) +
                           ") was fed again, so the cache grew by " +
                           std::to_string(a.appended.empty() ? 0 : a.appended[0]) + " in one step")
              .evidence({{"fed_tokens", static_cast<double>(st.fedIds.size())},
                         {"expected_tokens", static_cast<double>(st.fedIds.size() - 1)},
                         {"duplicated_token", static_cast<double>(st.fedIds.front())},
                         {"cache_length_before",
                          static_cast<double>(a.lengthBefore.empty() ? 0 : a.lengthBefore[0])},
                         {"cache_length_after",
                          static_cast<double>(a.lengthAfter.empty() ? 0 : a.lengthAfter[0])}}));
  }
  if (a.duplicateLayer >= 0) {
    const auto l = static_cast<size_t>(a.duplicateLayer);
    f.add(FindingDraft(finding::DuplicateAppend)
              .at(st)
              .layer(a.duplicateLayer)
              .position(a.cacheRealBefore)
              .confidence(0.97)
              .explanation(
                  "layer " + std::to_string(l) + " appended " + std::to_string(a.appended[l]) +
                  " records for " + std::to_string(a.fedCount) +
                  " fed token(s): its cache length went from " + std::to_string(a.lengthBefore[l]) +
                  " to " + std::to_string(a.lengthAfter[l]))
              .evidence({{"appended", static_cast<double>(a.appended[l])},
                         {"fed_tokens", static_cast<double>(a.fedCount)},
                         {"cache_length_before", static_cast<double>(a.lengthBefore[l])},
                         {"cache_length_after", static_cast<double>(a.lengthAfter[l])}}));
  }
  if (!a.positionsOk && !chunkPosition(r, a, f, /*fromValues=*/false)) {
    std::map<std::string, double> ev{{"offset", static_cast<double>(a.positionOffset)},
                                     {"expected_position", static_cast<double>(a.expectedPosition)},
                                     {"recorded_position", static_cast<double>(a.recordedPosition)},
                                     {"max_logit_error", a.logitError}};
    std::string ex = "position ids do not continue from the cache: expected " + std::to_string(a.expectedPosition) +
                     ", recorded " + std::to_string(a.recordedPosition) + " (offset " + std::to_string(a.positionOffset) + ")";
    if (!st.fedMask.empty()) ex += "; left-padded input: positions must follow cumsum(mask) - 1, not arange";
    if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
    // Positions taken from a cache length that a duplicate append inflated follow from it.
    const int64_t excess = a.lengthBefore.empty() ? 0 : a.lengthBefore[0] - a.cacheRealBefore;
    Finding pos = FindingDraft(finding::Position)
                      .request(r)
                      .step(st.step)
                      .layer(0)
                      .position(a.expectedPosition)
                      .confidence(0.95)
                      .explanation(ex)
                      .evidence(ev)
                      .finish();
    if (excess > 0 && a.positionOffset == excess && f.hasFor(finding::DuplicateAppend, r)) {
      pos.causedBy = finding::DuplicateAppend;
      pos.explanation += "; the offset equals the " + std::to_string(excess) +
                         " extra cache entries the duplicate append left: the engine takes "
                         "positions from the cache length";
      pos.evidence["extra_cache_entries"] = static_cast<double>(excess);
    } else if (excess > 0 && a.positionOffset == excess &&
               f.hasFor(finding::SpeculativeRollback, r)) {
      pos.causedBy = finding::SpeculativeRollback;
      pos.explanation += "; the offset equals the " + std::to_string(excess) +
                         " rejected drafts' rows the skipped rollback left: the engine takes "
                         "positions from the cache length";
      pos.evidence["extra_cache_entries"] = static_cast<double>(excess);
    }
    f.addExisting(pos, st.tick);
  }
  if (a.streamMismatch) {
    // Whose tokens were fed? Another request's stream at the same indices means ownership.
    int64_t owner = -1;
    for (const auto& req : trace_.requests) {
      if (req.id == r) continue;
      const std::vector<int64_t> s = req.stream();
      bool all = true;
      for (size_t j = 0; j < st.fedIds.size() && all; ++j) {
        const int64_t p = a.streamIndex[j];
        all = p >= 0 && p < static_cast<int64_t>(s.size()) && s[static_cast<size_t>(p)] == st.fedIds[j];
      }
      if (all) owner = req.id;
    }
    if (owner >= 0)
      f.add(FindingDraft(finding::CrossRequest)
                .at(st)
                .position(a.cacheRealBefore)
                .confidence(0.9)
                .explanation("the tokens fed at this step belong to request " +
                             std::to_string(owner) + "'s stream, not this request's")
                .evidence({{"other_request", static_cast<double>(owner)}}));
    else
      f.add(
          FindingDraft(finding::Position)
              .at(st)
              .position(a.cacheRealBefore)
              .confidence(0.6)
              .explanation(
                  "the fed tokens differ from this request's prompt + generated stream at index " +
                  std::to_string(a.cacheRealBefore) + " (token ownership)")
              .evidence({{"stream_index", static_cast<double>(a.cacheRealBefore)}}));
  }
  if (a.rewrittenLayer >= 0) rewritten(r, a, f);
  if (a.staleOnset) {
    std::map<std::string, double> ev{
        {"weights_version", static_cast<double>(a.version)},
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
    f.add(FindingDraft(finding::StaleCache)
              .at(st)
              .position(a.cacheRealBefore)
              .confidence(valuesAgree ? 0.99 : 0.9)
              .explanation(ex)
              .evidence(ev));
  }
  if (a.beyondContext) {
    f.add(FindingDraft(finding::ContextLimit)
              .at(st)
              .position(a.beyondPosition)
              .confidence(1.0)
              .explanation("position " + std::to_string(a.beyondPosition) +
                           " was used but the model has " +
                           std::to_string(trace_.model.maxPositions) +
                           " positions: the token could not be fed back")
              .evidence({{"position", static_cast<double>(a.beyondPosition)},
                         {"max_positions", static_cast<double>(trace_.model.maxPositions)}}));
  }
}

void Diagnosis::valueBased(int64_t r, const StepAnalysis& a, FindingBuilder& f) {
  const TraceStep& st = *a.step;
  const TraceRequest* req = trace_.findRequest(r);
  if (!req) return;
  const RequestReference* own = refs_.get(r, a.version, req->stream());
  if (!own) return;
  std::map<std::string, double> ev{{"max_logit_error", a.logitError}};
  if (a.firstBadLayer >= 0) {
    const auto l = static_cast<size_t>(a.firstBadLayer);
    ev["layer_key_error"] = a.keyError[l];
    ev["layer_value_error"] = a.valueError[l];
    if (l > 0) ev["previous_layer_key_error"] = a.keyError[l - 1];
    if (chunkPosition(r, a, f, /*fromValues=*/true)) return;
    // Keys rotated with another RoPE scaling at the right positions: before the position
    // probe, which reads a dropped linear factor f as the right key at f x the position.
    if (auto rope = RopeScalingEvidence::forAudit(refs_.modelConfig(), trace_.model, tol_)) {
      std::vector<const StepAnalysis*> from;
      for (const auto& s : analyses_.at(r))
        if (&s == &a || !from.empty()) from.push_back(&s);
      if (auto m = rope->explain(from, *own)) {
        f.add(rope->finding(a, *m, ev));
        return;
      }
    }
    SignatureSearch search(refs_, tol_, references_);
    if (auto m = search.explain(r, a, *own)) {
      ev["match_error"] = m->error;
      ev["own_reference_error"] = m->ownError;
      if (m->kind == finding::WrongLayer) {
        ev["source_layer"] = static_cast<double>(m->layer);
        f.add(FindingDraft(finding::WrongLayer)
                  .at(st)
                  .layer(a.firstBadLayer)
                  .position(a.firstBadStreamIndex)
                  .confidence(0.95)
                  .explanation("layers 0.." + std::to_string(l - (l > 0 ? 1 : 0)) +
                               (l > 0 ? " match the reference; " : "; ") + "layer " +
                               std::to_string(l) + "'s new K/V records equal layer " +
                               std::to_string(m->layer) + "'s reference projections (max diff " +
                               numberText(m->error) + ") instead of its own (max diff " +
                               numberText(m->ownError) + "): layer " + std::to_string(l) +
                               " stores and reads layer " + std::to_string(m->layer) +
                               "'s cache; logits moved by " + numberText(a.logitError))
                  .evidence(ev));
      } else if (m->kind == finding::CrossRequest) {
        ev["other_request"] = static_cast<double>(m->request);
        ev["other_position"] = static_cast<double>(m->position);
        f.add(FindingDraft(finding::CrossRequest)
                  .at(st)
                  .layer(a.firstBadLayer)
                  .position(a.firstBadStreamIndex)
                  .confidence(0.95)
                  .explanation("layer " + std::to_string(l) +
                               "'s records for this request equal request " +
                               std::to_string(m->request) + "'s reference at its position " +
                               std::to_string(m->position) + " (max diff " + numberText(m->error) +
                               "): another request's row was written into this one")
                  .evidence(ev));
      } else {
        const int64_t expected =
            a.cacheRealBefore + a.firstBadRealOrdinal;  // real tokens, not padding columns
        ev["offset"] = static_cast<double>(m->position - expected);
        ev["computed_at_position"] = static_cast<double>(m->position);
        f.add(
            FindingDraft(finding::Position)
                .at(st)
                .layer(0)
                .position(a.firstBadStreamIndex)
                .confidence(0.9)
                .explanation(
                    "layer 0's key for the token at stream position " +
                    std::to_string(a.firstBadStreamIndex) +
                    " equals the reference key of the same token at position " +
                    std::to_string(m->position) + " (offset " +
                    std::to_string(m->position - expected) +
                    ") although the trace records the right position ids: the engine applied other "
                    "positions; logits moved by " +
                    numberText(a.logitError))
                .evidence(ev));
      }
      return;
    }
    if (tol_.cache().quantized())
      if (auto q = measureQuantization(a, *own, tol_)) {
        f.add(quantizationFinding(a, *q, tol_, ev));
        return;
      }
    // A query at position i first sees a window bug at i >= window (one key too many/few).
    const bool windowed = slidingWindow_ > 0 && a.firstBadStreamIndex >= slidingWindow_;
    if (windowed) {
      ev["window"] = static_cast<double>(slidingWindow_);
      f.add(FindingDraft(finding::SlidingWindow)
                .at(st)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.6)
                .explanation("the first mismatch appears once the sequence (" +
                             std::to_string(a.firstBadStreamIndex + 1) +
                             " tokens) outgrows the sliding window of " +
                             std::to_string(slidingWindow_) +
                             "; no layer, position or request explains the values")
                .evidence(ev));
      return;
    }
    if (l > 0) {
      f.add(FindingDraft(finding::WrongLayer)
                .at(st)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.5)
                .explanation("layers below " + std::to_string(l) +
                             " match the reference and layer " + std::to_string(l) +
                             " differs (key error " + numberText(a.keyError[l]) +
                             "), but no other layer's records match: check what layer " +
                             std::to_string(l - 1) + "'s attention read from the cache")
                .evidence(ev));
    } else {
      f.add(FindingDraft(finding::Reference)
                .at(st)
                .layer(0)
                .position(a.firstBadStreamIndex)
                .confidence(0.5)
                .explanation("layer 0's records differ from the reference (error " +
                             numberText(a.keyError[0]) +
                             ") and match no other position or request: were they computed with "
                             "these weights?")
                .evidence(ev));
    }
    return;
  }
  // Every record matches but the logits do not: the attention read something else.
  const bool windowed = slidingWindow_ > 0 && a.lastRealStreamIndex() >= slidingWindow_;
  const int64_t other = interleavedRequest(r, a);
  if (windowed) {
    ev["window"] = static_cast<double>(slidingWindow_);
    f.add(FindingDraft(finding::SlidingWindow)
              .at(st)
              .position(a.lastRealStreamIndex())
              .confidence(0.7)
              .explanation("every K/V record matches but the logits differ by " +
                           numberText(a.logitError) + " once the sequence outgrows the window of " +
                           std::to_string(slidingWindow_) +
                           ": the attention window keeps the wrong keys")
              .evidence(ev));
  } else {
    if (other >= 0) ev["other_request"] = static_cast<double>(other);
    f.add(FindingDraft(finding::CrossRequest)
              .at(st)
              .position(a.lastRealStreamIndex())
              .confidence(other >= 0 ? 0.6 : 0.4)
              .explanation(
                  "every new K/V record matches the reference but the logits differ by " +
                  numberText(a.logitError) +
                  ": the attention read cache rows that are not this request's records" +
                  (other >= 0 ? " (request " + std::to_string(other) + " ran in between)" : ""))
              .evidence(ev));
  }
}

void Diagnosis::driftAndTies(int64_t r, const StepAnalysis& a, FindingBuilder& f) {
  const TraceStep& st = *a.step;
  if (!a.logitsCompared || a.logitsDiverged || st.chosenToken < 0 || a.referenceToken < 0 ||
      noDrift_.count(r))
    return;
  const TraceRequest* req = trace_.findRequest(r);
  if (!req || !req->policy.greedy() || st.chosenToken == a.referenceToken) return;
  // Greedy on logits within tolerance, yet another token: precision flipped a near tie
  // unless the cached row itself prefers the chosen token exactly (then it is policy).
  const auto& lg = st.logits.data;
  const float best = *std::max_element(lg.begin(), lg.end());
  if (lg[static_cast<size_t>(st.chosenToken)] == best && lg[static_cast<size_t>(a.referenceToken)] < best)
    f.add(FindingDraft(finding::Drift)
              .at(st)
              .position(a.lastRealStreamIndex())
              .confidence(0.8)
              .explanation("the greedy token flipped from " + std::to_string(a.referenceToken) +
                           " to " + std::to_string(st.chosenToken) +
                           " on a near tie (top-2 margin " + numberText(a.top2Margin) +
                           ") while the logits agree within tolerance (" +
                           numberText(a.logitError) + " <= " + numberText(a.logitTol) +
                           "): precision drift, not a cache bug")
              .evidence({{"top2_margin", a.top2Margin},
                         {"max_logit_error", a.logitError},
                         {"tolerance", a.logitTol}}));
}

void Diagnosis::run(FindingBuilder& f) {
  for (const auto& [r, steps] : analyses_) {
    bool valueDone = false, structuralSeen = false;
    previousTick_.erase(r);
    for (const auto& a : steps) {
      if (a.structural()) {
        structural(r, a, f);
        structuralSeen = true;
      } else if (!valueDone && !structuralSeen && (a.firstBadLayer >= 0 || a.logitsDiverged) && !a.referenceMissing) {
        valueBased(r, a, f);
        valueDone = true;
      }
      // After a divergence, later near-tie flips are its consequences, not drift.
      if (!valueDone && !structuralSeen) driftAndTies(r, a, f);
      previousTick_[r] = a.step->tick;
    }
  }
}

}  // namespace kvscope::detail
