#include "audit/RequestWalk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "audit/ColumnDiff.hpp"
#include "audit/RecordedConvState.hpp"
#include "audit/rows/kv_quantization/QuantizationEvidence.hpp"

namespace kvscope::detail {

int64_t StepAnalysis::lastRealStreamIndex() const {
  for (auto it = streamIndex.rbegin(); it != streamIndex.rend(); ++it)
    if (*it >= 0) return *it;
  return -1;
}

int64_t StepAnalysis::realOrdinal(int64_t column) const {
  int64_t n = 0;
  for (int64_t j = 0; j < column; ++j) n += step->isRealEntry(static_cast<size_t>(j)) ? 1 : 0;
  return n;
}

RequestWalk::RequestWalk(const Trace& trace, const TraceRequest& request,
                         const Tolerance& tolerance, ReferenceLookup reference,
                         MissingReason whyMissing)
    : trace_(trace),
      request_(request),
      tol_(tolerance),
      rowScaled_(tolerance.cache().quantized() && tolerance.cache().scale == "per_token_head"),
      reference_(std::move(reference)),
      whyMissing_(std::move(whyMissing)) {
  stream_ = request.stream();
  const auto L = static_cast<size_t>(trace.model.numLayers), H = static_cast<size_t>(trace.model.numKvHeads);
  rows_.assign(L, RebuiltCacheRow(static_cast<int64_t>(H), trace.model.headDim, trace.model.valueDim()));
  length_.assign(L, 0);
  columnVersion_.assign(L, {});
  columnStream_.assign(L, {});
  columnPosition_.assign(L, {});
}

const RequestReference* RequestWalk::lookup(uint64_t version) {
  const RequestReference* ref = reference_(version);
  lastMissingReason_ = ref || !whyMissing_ ? std::string() : whyMissing_();
  return ref;
}

std::pair<double, double> RequestWalk::rebuiltColumnDiff(size_t l, int64_t c,
                                                         const RequestReference& ref,
                                                         int64_t p) const {
  const int64_t T = ref.keys[l].shape[1];
  double err = 0, mag = 0;
  // Keys, then values (of their own width where the model says so: MLA).
  const RebuiltCacheRow& own = rows_[l];
  for (const auto& [isKey, theirs, d] :
       {std::tuple{true, &ref.keys[l], trace_.model.headDim},
        std::tuple{false, &ref.values[l], trace_.model.valueDim()}})
    for (int64_t h = 0; h < own.heads(); ++h)
      for (int64_t k = 0; k < d; ++k) {
        const double x = (isKey ? own.key(h, c) : own.value(h, c))[k];
        const double y = theirs->data[static_cast<size_t>((static_cast<int64_t>(h) * T + p) * d + k)];
        err = std::max(err, std::fabs(x - y));
        if (std::isnan(x) != std::isnan(y)) err = INFINITY;
        mag = std::max(mag, std::fabs(y));
      }
  return {err, mag};
}

void RequestWalk::alignStream(StepAnalysis& a, const std::vector<int64_t>& real, int64_t& streamPos) {
  const TraceStep& st = *a.step;
  const auto n = static_cast<int64_t>(real.size());
  auto fedAt = [&](int64_t k) { return st.fedIds[static_cast<size_t>(real[static_cast<size_t>(k)])]; };
  auto streamAt = [&](int64_t i) { return i >= 0 && i < static_cast<int64_t>(stream_.size()) ? stream_[static_cast<size_t>(i)] : -1; };
  bool same = true;
  for (int64_t k = 0; k < n; ++k) same = same && fedAt(k) == streamAt(streamPos + k);
  a.streamIndex.assign(st.fedIds.size(), -1);
  if (same) {
    for (int64_t k = 0; k < n; ++k) a.streamIndex[static_cast<size_t>(real[static_cast<size_t>(k)])] = streamPos + k;
    streamPos += n;
    return;
  }
  // The previous stream token fed again in front of the expected ones?
  bool dup = n >= 2 && streamPos > 0 && fedAt(0) == streamAt(streamPos - 1);
  for (int64_t k = 1; dup && k < n; ++k) dup = fedAt(k) == streamAt(streamPos + k - 1);
  if (dup) {
    a.duplicatedPrevious = true;
    for (int64_t k = 1; k < n; ++k) a.streamIndex[static_cast<size_t>(real[static_cast<size_t>(k)])] = streamPos + k - 1;
    streamPos += n - 1;
    return;
  }
  a.streamMismatch = true;
  for (int64_t k = 0; k < n; ++k) a.streamIndex[static_cast<size_t>(real[static_cast<size_t>(k)])] = streamPos + k;
  streamPos += n;
}

void RequestWalk::checkPositions(StepAnalysis& a, const std::vector<int64_t>& real) {
  const TraceStep& st = *a.step;
  for (size_t k = 0; k < real.size(); ++k) {
    const int64_t recorded = st.positions[static_cast<size_t>(real[k])];
    // A previous token fed again takes either its own position again (one before the
    // cache's end) or the next one: both are the duplicate's consequence, not a second bug.
    const int64_t back =
        a.duplicatedPrevious && !real.empty() &&
                st.positions[static_cast<size_t>(real.front())] == a.cacheRealBefore - 1
            ? 1
            : 0;
    const int64_t expected = a.cacheRealBefore + static_cast<int64_t>(k) - back;
    if (trace_.model.maxPositions > 0 && recorded >= trace_.model.maxPositions && !a.beyondContext) {
      a.beyondContext = true;
      a.beyondPosition = recorded;
    }
    if (recorded != expected && a.positionsOk) {
      a.positionsOk = false;
      a.positionOffset = recorded - expected;
      a.expectedPosition = expected;
      a.recordedPosition = recorded;
    }
  }
}

void RequestWalk::checkCache(StepAnalysis& a, size_t l, const TraceLayerRecord& rec) {
  const int64_t appended = rec.keys.shape.size() == 3 ? rec.keys.shape[1] : 0;
  a.appended[l] = appended;
  a.lengthBefore[l] = length_[l];
  if (appended > a.fedCount + a.reused && a.duplicateLayer < 0)
    a.duplicateLayer = static_cast<int>(l);
  // A ring layer holds at most its slots: its length is the slots occupied.
  const int64_t slots = trace_.layerKind(static_cast<int64_t>(l)).ringSlots;
  const auto held = [&](int64_t n) { return slots > 0 ? std::min(n, slots) : n; };
  if (slots > 0) a.lengthBefore[l] = held(length_[l]);
  const int64_t after = rec.cacheLength > 0 ? rec.cacheLength : held(length_[l] + appended);
  a.lengthAfter[l] = after;
  // A speculative step's rejected drafts leave the cache after it: it keeps the rest.
  const int64_t expected = held(length_[l] + a.reused + a.fedCount - a.rejected);
  if (a.rejected > 0 && after == expected + a.rejected && appended >= a.fedCount) {
    if (a.rollbackLayer < 0) a.rollbackLayer = static_cast<int>(l);
    a.rollbackLayers.push_back(static_cast<int>(l));
  } else if (after != expected && a.lengthMismatchLayer < 0) {
    a.lengthMismatchLayer = static_cast<int>(l);
  }
  // Rebuild the cache from the appended records, keeping each column's stream index and
  // weights version.
  const int64_t H = trace_.model.numKvHeads, d = trace_.model.headDim, dv = trace_.model.valueDim();
  if (appended > 0) rows_[l].append(rec.keys, rec.values);
  for (int64_t j = 0; j < appended; ++j) {
    // Reused prefix-cache entries are stream positions 0..reused-1; then the fed entries.
    const int64_t f = j - a.reused;
    const bool fedEntry = f >= 0 && f < static_cast<int64_t>(a.streamIndex.size());
    const int64_t stream =
        j < a.reused ? j : (fedEntry ? a.streamIndex[static_cast<size_t>(f)] : -1);
    columnStream_[l].push_back(stream);
    columnPosition_[l].push_back(j < a.reused ? j
                                 : fedEntry && stream >= 0
                                     ? a.step->positions[static_cast<size_t>(f)]
                                     : -1);
    columnVersion_[l].push_back(a.version);
  }
  length_[l] += appended;
  // The rolled-back drafts (appended last) leave the rebuilt cache as they left the engine's.
  const int64_t trim = a.rejected > 0 ? std::clamp<int64_t>(length_[l] - after, 0, a.rejected) : 0;
  if (trim > 0) {
    rows_[l].trim(trim);
    columnStream_[l].resize(columnStream_[l].size() - static_cast<size_t>(trim));
    columnPosition_[l].resize(columnPosition_[l].size() - static_cast<size_t>(trim));
    columnVersion_[l].resize(columnVersion_[l].size() - static_cast<size_t>(trim));
    length_[l] -= trim;
  }
  const auto& vs = columnVersion_[l];
  if (std::any_of(vs.begin(), vs.end(), [&](uint64_t v) { return v != a.version; })) {
    a.versionMix = true;
    a.oldestVersion = *std::min_element(vs.begin(), vs.end());
  }
  // Earlier rows unchanged? Checksums prove it without storing the cache; snapshots also
  // say which entries changed.
  bool rewritten = false;
  if (slots > 0) {  // a ring's checksums cover its slots, not the stream-order cache
    checkRing(a, l, rec, after);
    return;
  }
  if (rec.keyChecksum && rec.valueChecksum &&
      (*rec.keyChecksum != rows_[l].checksum(true) || *rec.valueChecksum != rows_[l].checksum(false)))
    rewritten = true;
  if (!rec.snapshotKeys.empty() && rec.snapshotKeys.shape[1] == length_[l]) {
    const int64_t t = length_[l];
    std::vector<int64_t> changedColumns;
    for (int64_t c = 0; c < t; ++c) {
      bool changed = false;
      for (int64_t h = 0; h < H && !changed; ++h) {
        for (int64_t k = 0; k < d && !changed; ++k)
          changed = rec.snapshotKeys.data[static_cast<size_t>((h * t + c) * d + k)] != rows_[l].key(h, c)[k];
        for (int64_t k = 0; k < dv && !changed; ++k)
          changed = rec.snapshotValues.data[static_cast<size_t>((h * t + c) * dv + k)] != rows_[l].value(h, c)[k];
      }
      if (changed) changedColumns.push_back(c);
    }
    rewritten = rewritten || !changedColumns.empty();
    if (!changedColumns.empty() && a.rewrittenLayer < 0) {
      a.rewrittenColumns = changedColumns;
      for (int64_t c : changedColumns)
        a.rewrittenStream.push_back(columnStream_[l][static_cast<size_t>(c)]);
    }
    // From here on the cache is what the engine really held: a rewrite is reported at the
    // step it happens, not again at every later step.
    if (!changedColumns.empty()) rows_[l].replaceWith(rec.snapshotKeys, rec.snapshotValues);
  }
  if (rewritten) {
    if (a.rewrittenLayer < 0) a.rewrittenLayer = static_cast<int>(l);
    a.rewrittenLayers.push_back(static_cast<int>(l));
  }
}

void RequestWalk::checkRing(StepAnalysis& a, size_t l, const TraceLayerRecord& rec, int64_t held) {
  if (rec.ringPositions.empty()) return;  // no map recorded: nothing to check the slots with
  ++a.ringMapsChecked;
  const TraceLayerKind& kind = trace_.layerKind(static_cast<int64_t>(l));
  RingMapProblem problem = checkRingMap(rec.ringPositions, fedPositions_, fedCacheIndex_, kind.window, kind.chunk);
  if (problem.ok() && ringChecksumsMatch(l, rec, held) == false) problem.kind = "checksum";
  if (!problem.ok() && a.ringLayer < 0) {
    a.ringLayer = static_cast<int>(l);
    a.ringProblem = problem;
  }
}

std::optional<bool> RequestWalk::ringChecksumsMatch(size_t l, const TraceLayerRecord& rec,
                                                    int64_t held) const {
  if (!rec.keyChecksum || !rec.valueChecksum ||
      held > static_cast<int64_t>(rec.ringPositions.size()))
    return std::nullopt;
  const auto& positions = columnPosition_[l];
  std::vector<int64_t> slots;  // the rebuilt column each slot holds, in slot order
  for (int64_t s = 0; s < held; ++s) {
    const int64_t p = rec.ringPositions[static_cast<size_t>(s)];
    const auto it = p < 0 ? positions.rend() : std::find(positions.rbegin(), positions.rend(), p);
    if (it == positions.rend()) return std::nullopt;  // padding or unknown: not verifiable
    slots.push_back(static_cast<int64_t>(positions.rend() - it - 1));
  }
  return *rec.keyChecksum == rows_[l].checksum(true, slots) &&
         *rec.valueChecksum == rows_[l].checksum(false, slots);
}

void RequestWalk::checkStaleValues(StepAnalysis& a, const RequestReference* current) {
  const RequestReference* old = lookup(a.oldestVersion);
  if (old && !current) lookup(a.version);  // for its reason
  if (!old || !current) {
    const uint64_t missing = !old ? a.oldestVersion : a.version;
    a.staleNotChecked = "no reference for weights version " + std::to_string(missing) +
                        (lastMissingReason_.empty() ? "" : ": " + lastMissingReason_);
    return;
  }
  double tolerance = 0;
  for (size_t l = 0; l < rows_.size(); ++l) {
    const auto& streams = columnStream_[l];
    for (size_t c = 0; c < streams.size(); ++c) {
      const int64_t p = streams[c];
      if (p < 0 || l >= old->keys.size() || l >= current->keys.size() ||
          p >= old->keys[l].shape[1] || p >= current->keys[l].shape[1])
        continue;
      const auto vsOld = rebuiltColumnDiff(l, static_cast<int64_t>(c), *old, p);
      const auto vsNew = rebuiltColumnDiff(l, static_cast<int64_t>(c), *current, p);
      tolerance = std::max(tolerance, tol_.forRecord(static_cast<int64_t>(l), p, vsNew.second));
      if (columnVersion_[l][c] != a.version) {
        a.reusedVsOld = std::max(a.reusedVsOld, vsOld.first);
        a.reusedVsNew = std::max(a.reusedVsNew, vsNew.first);
        if (l == 0) ++a.reusedRows;
      } else if (l == 0) {
        // Fresh rows of layer 0 depend only on the token, its position and the new
        // weights; deeper ones also on the attention over the stale rows.
        a.freshVsNew = std::max(a.freshVsNew, vsNew.first);
      }
    }
  }
  a.staleTolerance = tolerance;
  a.staleValuesChecked = true;
}

void RequestWalk::compareState(StepAnalysis& a, size_t l, const TraceLayerRecord& rec, const RequestReference& ref) {
  if (rec.recurrentState.empty()) return;
  const auto it = ref.statesAt.find(a.stateLength);
  if (it == ref.statesAt.end() || l >= it->second.recurrent.size() || it->second.recurrent[l].empty()) return;
  double err = 0, mag = 0;
  bool shapesDiffer = false;
  const FloatTensor conv = convStateAsRecorded(it->second.conv[l], rec.convState.shape);  // K or K-1 columns
  for (const auto& [got, want] : {std::pair{&rec.convState, &conv},
                                  std::pair{&rec.recurrentState, &it->second.recurrent[l]}}) {
    if (got->shape != want->shape) {
      shapesDiffer = shapesDiffer || !got->empty();
      continue;
    }
    err = std::max(err, static_cast<double>(FloatTensor::maxAbsDiff(*got, *want)));
    mag = std::max(mag, static_cast<double>(want->maxAbs()));
  }
  // A state is the sum of everything the layer read: held to the tolerance of a record of
  // the layer at the step's last position, scaled by the state's own magnitude.
  const double tol = tol_.forRecord(static_cast<int64_t>(l), std::max<int64_t>(a.stateLength - 1, 0), mag);
  a.stateError[l] = shapesDiffer ? std::numeric_limits<double>::infinity() : err;
  a.stateTol[l] = tol;
  ++a.statesCompared;
  if (a.firstBadStateLayer < 0 && a.stateError[l] > tol) a.firstBadStateLayer = static_cast<int>(l);
}

void RequestWalk::compareRecords(StepAnalysis& a, size_t l, const TraceLayerRecord& rec, const RequestReference& ref) {
  if (rec.keys.shape.size() != 3 || l >= ref.keys.size()) return;
  const int64_t T = ref.keys[l].shape[1];
  double kErr = 0, vErr = 0, kTol = 0, vTol = 0;
  // Record column c: a prefix-cache hit's reused entries first (stream positions 0..reused-1),
  // then one per fed entry.
  const int64_t columns = a.reused + static_cast<int64_t>(a.streamIndex.size());
  for (int64_t c = 0; c < columns; ++c) {
    const bool reusedRow = c < a.reused;
    const int64_t j = c - a.reused;  // the fed entry (reused rows: negative)
    const int64_t p = reusedRow ? c : a.streamIndex[static_cast<size_t>(j)];
    if (p < 0 || p >= T || c >= rec.keys.shape[1]) continue;
    const auto [ke, km] = columnDiff(rec.keys, c, ref.keys[l], p);
    const auto [ve, vm] = columnDiff(rec.values, c, ref.values[l], p);
    const double slack = nearTieSlack(ref.routing, static_cast<int64_t>(l), p);
    const double kt = slack * tol_.forRecord(static_cast<int64_t>(l), p, km),
                 vt = slack * tol_.forRecord(static_cast<int64_t>(l), p, vm);
    // A symmetric per-row scale stores each row's largest element exactly.
    const bool scaleMoved =
        rowScaled_ && rowScaleGap(rec.keys, rec.values, c, ref.keys[l], ref.values[l], p) >
                          tol_.forRowScale(static_cast<int64_t>(l), p, std::max(km, vm));
    const bool bad = ke > kt || ve > vt || scaleMoved;
    if (reusedRow) {
      a.reusedError[l] = std::max({a.reusedError[l], ke, ve});
      if (bad && a.reusedBadLayer < 0) {
        a.reusedBadLayer = static_cast<int>(l);
        a.reusedBadPosition = p;
      }
    } else {
      kErr = std::max(kErr, ke);
      vErr = std::max(vErr, ve);
      kTol = std::max(kTol, kt);
      vTol = std::max(vTol, vt);
    }
    if (bad && a.firstBadLayer < 0) {
      a.firstBadLayer = static_cast<int>(l);
      a.firstBadColumn = reusedRow ? c : j;
      a.firstBadRealOrdinal = reusedRow ? c : a.realOrdinal(j);
      a.firstBadStreamIndex = p;
    }
  }
  a.keyError[l] = kErr;
  a.valueError[l] = vErr;
  a.keyTol[l] = kTol;
  a.valueTol[l] = vTol;
}

void RequestWalk::compareLogits(StepAnalysis& a, const RequestReference& ref) {
  const TraceStep& st = *a.step;
  const int64_t p = a.lastRealStreamIndex();
  const float* r = ref.logitsAt(p);
  if (st.logits.empty() || !r) return;
  const int64_t V = ref.logits.shape[1];
  if (st.logits.numel() != V) return;
  if (std::isnan(r[0])) return;  // the reference trace has no row here
  double err = 0, mag = 0, best = -INFINITY, second = -INFINITY;
  int64_t arg = 0;
  for (int64_t i = 0; i < V; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(st.logits.data[static_cast<size_t>(i)] - r[i])));
    if (std::isnan(st.logits.data[static_cast<size_t>(i)])) err = INFINITY;
    mag = std::max(mag, static_cast<double>(std::fabs(r[i])));
    if (r[i] > best) {
      second = best;
      best = r[i];
      arg = i;
    } else if (r[i] > second) {
      second = r[i];
    }
  }
  a.logitsCompared = true;
  a.logitError = err;
  a.logitTol = nearTieSlack(ref.routing, -1, p) * tol_.forLogits(p, mag);
  if (p < static_cast<int64_t>(ref.roundingEffect.size()))  // a quantised cache's reference
    a.logitTol += tol_.flipFraction() * ref.roundingEffect[static_cast<size_t>(p)];
  a.top2Margin = best - second;
  a.referenceToken = arg;
  a.logitsDiverged = err > a.logitTol;
}

std::vector<StepAnalysis> RequestWalk::run() {
  std::vector<StepAnalysis> out;
  int64_t streamPos = 0, cacheReal = 0;
  const auto L = static_cast<size_t>(trace_.model.numLayers);
  for (const TraceStep* st : trace_.stepsOf(request_.id)) {
    StepAnalysis a;
    a.step = st;
    a.version = st->weightsVersion;
    if (st->resetsCache()) {
      streamPos = cacheReal = 0;
      for (auto& row : rows_) row.trim(row.size());
      std::fill(length_.begin(), length_.end(), 0);
      for (auto& v : columnVersion_) v.clear();
      for (auto& v : columnStream_) v.clear();
      for (auto& v : columnPosition_) v.clear();
      fedPositions_.clear();
      fedCacheIndex_.clear();
      cacheEntries_ = 0;
      staleSeen_ = false;
    }
    const std::vector<int64_t> real = st->realColumns();
    // A prefix-cache hit: the cache starts with the stream's first entries, not fed.
    a.reused = st->reusedCount;
    for (int64_t c = 0; c < a.reused; ++c) {
      fedPositions_.push_back(c);
      fedCacheIndex_.push_back(cacheEntries_ + c);
    }
    cacheEntries_ += a.reused;
    streamPos += a.reused;
    cacheReal += a.reused;
    a.cacheRealBefore = cacheReal;
    a.fedCount = static_cast<int64_t>(st->fedIds.size());
    a.rejected = st->rejectedCount();
    alignStream(a, real, streamPos);
    checkPositions(a, real);
    a.appended.assign(L, 0);
    a.lengthBefore.assign(L, 0);
    a.lengthAfter.assign(L, 0);
    a.keyError.assign(L, 0.0);
    a.valueError.assign(L, 0.0);
    a.keyTol.assign(L, 0.0);
    a.valueTol.assign(L, 0.0);
    a.reusedError.assign(L, 0.0);
    a.stateError.assign(L, 0.0);
    a.stateTol.assign(L, 0.0);
    a.stateLength = cacheReal + static_cast<int64_t>(real.size());  // the stream after the step
    // The entries this step leaves in the cache (rejected drafts leave it again).
    for (int64_t j = 0; j + a.rejected < a.fedCount; ++j)
      if (st->isRealEntry(static_cast<size_t>(j))) {
        fedPositions_.push_back(st->positions[static_cast<size_t>(j)]);
        fedCacheIndex_.push_back(cacheEntries_ + j);
      }
    cacheEntries_ += a.fedCount - a.rejected;
    const RequestReference* ref = lookup(a.version);
    a.referenceMissing = ref == nullptr;
    if (!ref) a.referenceMissingReason = lastMissingReason_;
    for (size_t l = 0; l < st->layers.size() && l < L; ++l) {
      if (ref && trace_.layerKind(static_cast<int64_t>(l)).recurrent) compareState(a, l, st->layers[l], *ref);
      if (!trace_.holdsRows(static_cast<int64_t>(l))) continue;  // not in a minimized trace
      checkCache(a, l, st->layers[l]);
      if (ref) compareRecords(a, l, st->layers[l], *ref);
    }
    if (ref) compareLogits(a, *ref);
    // Evidence for a stale cache where it starts: later steps of the same cache repeat it.
    a.staleOnset = a.versionMix && !staleSeen_;
    staleSeen_ = staleSeen_ || a.versionMix;
    if (a.staleOnset) checkStaleValues(a, ref);
    cacheReal += static_cast<int64_t>(real.size());
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace kvscope::detail
