#include "inspect/TimelineBuilder.hpp"

#include <algorithm>

#include "audit/NumberText.hpp"
#include "audit/rows/RowRegistry.hpp"

namespace kvscope::detail {

namespace {

const std::vector<std::string>* piecesOf(const AuditJobOutput& output, int64_t request) {
  const auto& reqs = output.result.trace.requests;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].id == request && i < output.tokenPieces.size()) return &output.tokenPieces[i];
  return nullptr;
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

// The request's step running at or after `tick` (nullptr when it had ended).
const TraceStep* stepAtTick(const std::vector<const TraceStep*>& steps, int64_t tick) {
  for (const TraceStep* st : steps)
    if (st->tick >= tick) return st;
  return nullptr;
}

bool hasEvent(const TraceStep& st, const char* kind) {
  return std::find(st.events.begin(), st.events.end(), kind) != st.events.end();
}

}  // namespace

bool TimelineBuilder::arrivesAt(const Trace& trace, const TraceStep& st) {
  if (hasEvent(st, "arrival")) return true;
  // A recorder that writes no arrival events (python/kvscope_trace's transformers recorder):
  // the request arrives at its first recorded step.
  const auto steps = trace.stepsOf(st.request);
  for (const TraceStep* s : steps)
    if (hasEvent(*s, "arrival")) return false;
  return !steps.empty() && steps.front() == &st;
}

RequestTimeline TimelineBuilder::build(const AuditJobOutput& output, int64_t request) {
  const AuditResult& result = output.result;
  RequestTimeline tl;
  tl.request = request;
  const std::vector<std::string>* pieces = piecesOf(output, request);
  auto pieceAt = [&](int64_t i) {
    return pieces && i >= 0 && static_cast<size_t>(i) < pieces->size()
               ? (*pieces)[static_cast<size_t>(i)]
               : std::string();
  };
  for (const StepNumerics& n : result.report.steps)
    if (n.request == request && n.diverged && (tl.divergentStep < 0 || n.step < tl.divergentStep))
      tl.divergentStep = n.step;
  const FirstDivergence& fd = result.report.firstDivergence;
  if (fd.present && fd.request == request && (tl.divergentStep < 0 || fd.step < tl.divergentStep))
    tl.divergentStep = fd.step;

  const auto steps = result.trace.stepsOf(request);
  int64_t stream = 0;
  std::vector<int64_t> lengthBefore;  // per layer, the cache length before the step
  bool draftsSeen = false, keptSeen = false;
  if (result.trace.kvCache.quantized() && !steps.empty())
    tl.markers.push_back({steps.front()->step, "kv_cache", result.trace.kvCache.describe(), false});
  // The RoPE scaling the trace declares, and where the audit found keys rotated otherwise.
  if (const auto& rope = result.trace.model.rope; rope && !steps.empty())
    tl.markers.push_back({steps.front()->step, "rope",
                          "RoPE " + rope->type + " x" + numberText(rope->factor), false});
  // Batch mates, and where the request stopped reproducing its solo run bit for bit.
  const TraceRequest* req = result.trace.findRequest(request);
  if (const size_t mates = result.trace.batchMatesOf(request).size(); mates > 0 && !steps.empty())
    tl.markers.push_back({steps.front()->step, "batch",
                          "batch group " + std::to_string(req->batchGroup) + ": " +
                              std::to_string(mates + 1) + " requests",
                          false});
  // Where the audit found what: each row marks its own findings.
  for (const Finding& f : result.report.findings)
    if (f.request == request)
      if (auto m = RowRegistry::row(f.id).marker(f)) tl.markers.push_back(std::move(*m));
  // Chunked prefill: where each chunk after the first starts (below), and the boundary
  // whose positions the audit found wrong (above).
  const int64_t promptLength = req ? static_cast<int64_t>(req->promptIds.size()) : 0;
  int64_t chunk = 0;
  // Ring caches: the step whose sequence first outgrows the ring's slots (it wraps).
  const std::vector<int64_t> rings = result.trace.ringLayers();
  const int64_t ringSlots = rings.empty() ? 0 : result.trace.layerKind(rings.front()).ringSlots;
  bool wrapSeen = false;
  for (const TraceStep* st : steps) {
    if (st->resetsCache())
      chunk = 0;
    stream += st->reusedCount;  // a prefix-cache hit's entries are the stream's first ones
    const int64_t streamBefore = stream;
    TimelineStep ts;
    ts.step = st->step;
    ts.tick = st->tick;
    for (size_t i = 0; i < st->fedIds.size(); ++i) {
      TimelineToken t;
      t.id = st->fedIds[i];
      t.position = i < st->positions.size() ? st->positions[i] : -1;
      t.real = st->isRealEntry(i);
      t.prompt = t.real && req ? stream < promptLength : st->step == 0;
      if (t.real) {
        t.stream = stream++;
        t.piece = pieceAt(t.stream);
        ts.recordedPosition = std::max(ts.recordedPosition, t.position);
      }
      ts.fed.push_back(std::move(t));
    }
    ts.expectedPosition = stream - 1;
    if (st->reusedCount > 0)  // a prefix-cache hit: its entries precede the fed tokens
      tl.markers.push_back({st->step, "prefix_hit",
                            "prefix cache: " + std::to_string(st->reusedCount) + " entries" +
                                (st->reusedFrom >= 0 ? " from req " + std::to_string(st->reusedFrom)
                                                     : std::string()),
                            false});
    if (ringSlots > 0 && !wrapSeen && stream > ringSlots) {
      wrapSeen = true;
      tl.markers.push_back({st->step, "window_wraps",
                            "ring of " + std::to_string(ringSlots) + " slots wraps", false});
    }
    // A step that feeds prompt tokens after the first ones is a prefill chunk.
    if (streamBefore < promptLength && stream > streamBefore) {
      if (streamBefore > st->reusedCount)
        tl.markers.push_back({st->step, "chunk",
                              "prefill chunk " + std::to_string(chunk) + " from position " +
                                  std::to_string(streamBefore),
                              false});
      ++chunk;
    }
    for (const auto& layer : st->layers) ts.cacheLength.push_back(layer.cacheLength);
    ts.events = st->events;
    ts.diverged = st->step == tl.divergentStep;
    if (!hasEvent(*st, "arrival") && arrivesAt(result.trace, *st))
      tl.markers.push_back(
          {st->step, "arrival", "arrival (tick " + std::to_string(st->tick) + ")", false});
    for (const auto& e : st->events) {
      TimelineMarker m;
      m.step = st->step;
      m.kind = e;
      m.label = e == "arrival" ? "arrival (tick " + std::to_string(st->tick) + ")" : e;
      m.alarm = e == "context_limit" || e == "weight_update";
      tl.markers.push_back(std::move(m));
    }
    // Speculative decoding: the first verifying step, and the first step whose cache grew by
    // more than the accepted tokens (the rejected drafts' rows were kept: the onset).
    if (st->draftCount > 0) {
      int64_t kept = 0;
      for (size_t l = 0; l < st->layers.size() && l < lengthBefore.size(); ++l)
        kept = std::max(kept, st->layers[l].cacheLength - lengthBefore[l] - st->realFedCount());
      if (kept > 0 && !keptSeen)
        tl.markers.push_back({st->step, "rollback_skipped",
                              "speculative: " + std::to_string(kept) + " rejected draft" +
                                  (kept == 1 ? "" : "s") + " kept",
                              true});
      else if (!draftsSeen)
        tl.markers.push_back({st->step, "speculative",
                              "speculative: " + std::to_string(st->draftCount) + " drafts, " +
                                  std::to_string(st->acceptedCount) + " accepted",
                              false});
      keptSeen = keptSeen || kept > 0;
      draftsSeen = true;
    }
    lengthBefore = ts.cacheLength;
    tl.steps.push_back(std::move(ts));
  }
  // Generated tokens that were never fed back (the last choice).
  if (req) {
    const int64_t fedGenerated = std::max<int64_t>(stream - promptLength, 0);
    for (auto g = static_cast<size_t>(fedGenerated); g < req->generated.size(); ++g) {
      TimelineToken t;
      t.id = req->generated[g];
      t.stream = promptLength + static_cast<int64_t>(g);
      t.piece = pieceAt(t.stream);
      tl.unfed.push_back(std::move(t));
    }
  }
  if (steps.empty()) return tl;
  // Other requests arriving while this one runs; an alarm when the newcomer was given this
  // request's cache row (the cross-request setting).
  const int64_t firstTick = steps.front()->tick, lastTick = steps.back()->tick;
  for (const TraceStep& other : result.trace.steps) {
    if (other.request == request || other.tick < firstTick || other.tick > lastTick ||
        !arrivesAt(result.trace, other))
      continue;
    const TraceStep* at = stepAtTick(steps, other.tick);
    if (!at) continue;
    TimelineMarker m;
    m.step = at->step;
    m.kind = "other_arrival";
    m.alarm = other.slot == at->slot;
    m.label = "req " + std::to_string(other.request) + " arrives (tick " +
              std::to_string(other.tick) + ")" + (m.alarm ? ", same row" : "");
    tl.markers.push_back(std::move(m));
  }
  for (const TraceEvent& ev : result.trace.events) {
    const TraceStep* at = stepAtTick(steps, ev.tick);
    if (!at || std::find(at->events.begin(), at->events.end(), ev.kind) != at->events.end())
      continue;
    tl.markers.push_back({at->step, ev.kind, ev.kind, true});
  }
  return tl;
}

std::string TimelineBuilder::tokenLabel(const AuditJobOutput& output, int64_t request,
                                        int64_t tokenId) {
  const TraceRequest* req = output.result.trace.findRequest(request);
  const std::vector<std::string>* pieces = piecesOf(output, request);
  if (req && pieces) {
    const std::vector<int64_t> stream = req->stream();
    for (size_t i = 0; i < stream.size() && i < pieces->size(); ++i)
      if (stream[i] == tokenId)
        return "'" + trimmed((*pieces)[i]) + "' #" + std::to_string(tokenId);
  }
  return "#" + std::to_string(tokenId);
}

}  // namespace kvscope::detail
