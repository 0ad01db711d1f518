#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "inspect/CacheRowReplay.hpp"
#include "inspect/LayerDiffs.hpp"
#include "inspect/StepPlace.hpp"
#include "inspect/TimelineBuilder.hpp"
#include "kvscope/Inspection.hpp"

namespace kvscope {

namespace {

using detail::CacheRowReplay;

// Copies head `head` of a [h, t, d] tensor into a [t, d] buffer.
std::vector<float> headSlice(const FloatTensor& t, int64_t head, int64_t* positions, int64_t* dim) {
  *positions = 0;
  *dim = 0;
  if (t.shape.size() != 3 || head < 0 || head >= t.shape[0]) return {};
  const int64_t T = t.shape[1], d = t.shape[2];
  *positions = T;
  *dim = d;
  const auto begin = t.data.begin() + head * T * d;
  return std::vector<float>(begin, begin + T * d);
}

// The cached side after (request, step) at `layer`: the engine's row rebuilt by
// CacheRowReplay when the checksum says it was overwritten, else the request's own records.
FloatTensor cachedSide(const AuditResult& result, int64_t request, int64_t step, int64_t layer,
                       KvKind kind, bool* rewritten, bool* replayed) {
  *rewritten = CacheRowReplay::rowRewritten(result.trace, request, step, layer, kind);
  *replayed = false;
  if (*rewritten) {
    FloatTensor row = CacheRowReplay::replay(result.trace, request, step, layer, kind);
    if (!row.empty()) {
      *replayed = true;
      return row;
    }
  }
  return result.cachedKv(request, step, layer, kind);
}

// A recurrent layer's state after (request, step): the trace's and the reference's after the
// same stream ([Hv, Dk, Dv] each; empty where not recorded or not computed).
std::pair<FloatTensor, FloatTensor> recurrentStates(const AuditResult& result, int64_t request, int64_t step,
                                                    int64_t layer) {
  const auto steps = result.trace.stepsOf(request);
  const auto at = std::find_if(steps.begin(), steps.end(), [&](const TraceStep* s) { return s->step == step; });
  const auto l = static_cast<size_t>(layer);
  if (at == steps.end() || l >= (*at)->layers.size()) return {};
  const FloatTensor& cached = (*at)->layers[l].recurrentState;
  FloatTensor reference;
  if (const RequestReference* ref = result.referenceFor(request)) {
    const auto it = ref->statesAt.find(result.trace.streamHeldAfter(request)[static_cast<size_t>(at - steps.begin())]);
    if (it != ref->statesAt.end() && l < it->second.recurrent.size()) reference = it->second.recurrent[l];
  }
  return {cached, reference};
}

// Per head: max |a - b| over the common positions of two [h, t, d] tensors; empty when
// their head counts or widths differ.
std::vector<float> headMaxima(const FloatTensor& a, const FloatTensor& b) {
  if (a.shape.size() != 3 || b.shape.size() != 3 || a.shape[0] != b.shape[0] ||
      a.shape[2] != b.shape[2])
    return {};
  const int64_t h = a.shape[0], ta = a.shape[1], tb = b.shape[1], d = a.shape[2];
  const int64_t t = std::min(ta, tb);
  std::vector<float> out(static_cast<size_t>(h), 0.0f);
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t p = 0; p < t; ++p) {
      const float* x = a.data.data() + (hh * ta + p) * d;
      const float* y = b.data.data() + (hh * tb + p) * d;
      for (int64_t j = 0; j < d; ++j)
        out[static_cast<size_t>(hh)] =
            std::max(out[static_cast<size_t>(hh)], std::abs(x[j] - y[j]));
    }
  return out;
}

const StepNumerics* numericsOf(const AuditReport& report, int64_t request, int64_t step) {
  for (const StepNumerics& n : report.steps)
    if (n.request == request && n.step == step) return &n;
  return nullptr;
}

}  // namespace

Inspector::Inspector(std::shared_ptr<const AuditJobOutput> output) : output_(std::move(output)) {
  if (!output_) throw std::invalid_argument("Inspector needs an audit output");
  appendOnly_ = !output_->result.trace.hasSnapshots();
  for (const auto& r : output_->result.trace.requests)
    timelines_.emplace(r.id, detail::TimelineBuilder::build(*output_, r.id));
}

std::vector<int64_t> Inspector::requests() const {
  std::vector<int64_t> ids;
  for (const auto& r : output_->result.trace.requests) ids.push_back(r.id);
  return ids;
}

std::vector<int64_t> Inspector::steps(int64_t request) const {
  std::vector<int64_t> out;
  for (const TraceStep* s : output_->result.trace.stepsOf(request)) out.push_back(s->step);
  return out;
}

int64_t Inspector::layers() const { return output_->result.trace.model.numLayers; }
int64_t Inspector::kvHeads() const { return output_->result.trace.model.numKvHeads; }

InspectionPoint Inspector::clamp(InspectionPoint p) const {
  const auto ids = requests();
  if (!ids.empty() && std::find(ids.begin(), ids.end(), p.request) == ids.end())
    p.request = ids.front();
  const auto st = steps(p.request);
  if (!st.empty()) {
    if (std::find(st.begin(), st.end(), p.step) == st.end()) {
      auto it = std::upper_bound(st.begin(), st.end(), p.step);
      p.step = it == st.begin() ? st.front() : *(it - 1);
    }
  } else {
    p.step = 0;
  }
  p.layer = std::clamp<int64_t>(p.layer, 0, std::max<int64_t>(0, layers() - 1));
  p.head = std::clamp<int64_t>(p.head, 0, std::max<int64_t>(0, headsAt(p.layer) - 1));
  return p;
}

int64_t Inspector::headsAt(int64_t layer) const {
  const Trace& trace = output_->result.trace;
  if (!trace.layerKind(layer).recurrent) return kvHeads();
  const auto l = static_cast<size_t>(layer);
  for (const TraceStep& st : trace.steps)  // the value heads of a recorded state
    if (l < st.layers.size() && st.layers[l].recurrentState.shape.size() == 3)
      return st.layers[l].recurrentState.shape[0];
  return kvHeads();
}

int64_t Inspector::worstHead(int64_t request, int64_t step, int64_t layer, KvKind kind) const {
  const AuditResult& result = output_->result;
  std::vector<float> maxima;
  if (result.trace.layerKind(layer).recurrent) {  // [Hv, Dk, Dv]: per value head, as [h, t, d]
    const auto [cached, reference] = recurrentStates(result, request, step, layer);
    maxima = headMaxima(cached, reference);
  } else {
    bool rewritten = false, replayed = false;
    const FloatTensor a = cachedSide(result, request, step, layer, kind, &rewritten, &replayed);
    maxima = headMaxima(a, result.referenceKv(request, step, layer, kind));
  }
  int64_t best = -1;
  float bestDiff = 0.0f;
  for (size_t h = 0; h < maxima.size(); ++h)
    if (maxima[h] > bestDiff) {
      bestDiff = maxima[h];
      best = static_cast<int64_t>(h);
    }
  return best;
}

const std::vector<double>& Inspector::layerDiffs(int64_t request, int64_t step, KvKind kind) {
  const AuditResult& result = output_->result;
  const auto key = std::make_tuple(request, step, static_cast<int>(kind));
  auto it = layerCache_.find(key);
  if (it != layerCache_.end()) return it->second;
  if (layerCache_.size() > 4096) layerCache_.clear();
  std::vector<double> diffs;
  // Stepping forward one step is the common case: extend the previous step's maxima by
  // the records this step appended instead of rebuilding every layer's whole cache.
  bool done = false;
  if (appendOnly_) {
    int64_t previousStep = -1;
    for (const TraceStep* st : result.trace.stepsOf(request)) {
      if (st->step >= step) break;
      previousStep = st->step;
    }
    auto prev = layerCache_.find(std::make_tuple(request, previousStep, static_cast<int>(kind)));
    if (previousStep >= 0 && prev != layerCache_.end())
      done = detail::LayerDiffs::extend(result, request, step, kind, prev->second, &diffs);
  }
  if (!done) diffs = detail::LayerDiffs::compute(result, request, step, kind);
  return layerCache_.emplace(key, std::move(diffs)).first->second;
}

StepView Inspector::view(const InspectionPoint& requested) {
  const AuditResult& result = output_->result;
  StepView v;
  v.requested = requested;
  InspectionPoint p = clamp(requested);
  const StepNumerics* numerics = numericsOf(result.report, p.request, p.step);
  if (p.autoKind) {
    // Keys or values: whichever is further past its tolerance at this layer.
    auto ratio = [&](KvKind kind) {
      const auto& diffs = layerDiffs(p.request, p.step, kind);
      const size_t l = static_cast<size_t>(p.layer);
      const double d = l < diffs.size() ? diffs[l] : 0.0;
      double tol = 0.0;
      if (numerics) {
        const auto& t = kind == KvKind::Keys ? numerics->keyTolerance : numerics->valueTolerance;
        tol = l < t.size() ? t[l] : 0.0;
      }
      if (std::isinf(d)) return d;
      return std::isnan(d) ? 0.0 : d / std::max(tol, 1e-30);
    };
    p.kind = ratio(KvKind::Values) > ratio(KvKind::Keys) ? KvKind::Values : KvKind::Keys;
  }
  v.worstHead = worstHead(p.request, p.step, p.layer, p.kind);
  if (p.autoHead && v.worstHead >= 0) p.head = v.worstHead;
  p.autoHead = p.autoKind = false;
  v.point = p;

  const bool recurrent = result.trace.layerKind(p.layer).recurrent;
  // Latent rows as their own kind; decompressed heads (model.latent_records "heads") are K/V.
  v.showsLatent = result.trace.layerKind(p.layer).latent && !result.trace.model.latentHeads;
  FloatTensor cachedT, refT;
  if (recurrent) {
    // A recurrent layer: its state after the step, one value head's [Dk, Dv] as the heatmap's rows.
    std::tie(cachedT, refT) = recurrentStates(result, p.request, p.step, p.layer);
    v.showsState = !cachedT.empty();
  } else {
    cachedT = cachedSide(result, p.request, p.step, p.layer, p.kind, &v.rowRewritten, &v.cachedFromReplay);
    refT = result.referenceKv(p.request, p.step, p.layer, p.kind);
  }
  int64_t dCached = 0, dRef = 0;
  v.cached = headSlice(cachedT, p.head, &v.cachedPositions, &dCached);
  v.reference = headSlice(refT, p.head, &v.referencePositions, &dRef);
  v.headDim = dCached ? dCached : dRef;
  v.heads = headsAt(p.layer);
  for (float x : v.cached) v.valueAbsMax = std::max(v.valueAbsMax, std::abs(x));
  for (float x : v.reference) v.valueAbsMax = std::max(v.valueAbsMax, std::abs(x));

  if (recurrent && !v.showsState) {
    v.note = "layer " + std::to_string(p.layer) +
             " keeps a recurrent state (Gated DeltaNet), not K/V rows, and the trace records none at this step";
  } else if (v.reference.empty()) {
    v.note = "no reference K/V for request " + std::to_string(p.request);
  } else if (dCached != dRef && dCached != 0) {
    v.note = "head dimension differs: cached " + std::to_string(dCached) + ", reference " +
             std::to_string(dRef);
  } else if (!v.cached.empty()) {
    const int64_t t = std::min(v.cachedPositions, v.referencePositions);
    const int64_t d = v.headDim;
    v.absDiff.resize(static_cast<size_t>(t * d));
    for (int64_t q = 0; q < t; ++q)
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = static_cast<size_t>(q * d + j);
        const float diff = std::abs(v.cached[i] - v.reference[i]);
        v.absDiff[i] = diff;
        if (diff > v.diffMax) {
          v.diffMax = diff;
          v.diffArgPosition = q;
          v.diffArgDim = j;
        }
      }
    if (v.cachedPositions != v.referencePositions)
      v.note = "cache length differs: cached " + std::to_string(v.cachedPositions) +
               " positions, reference " + std::to_string(v.referencePositions);
  }

  if (v.rowRewritten) {
    if (v.cachedFromReplay) {
      // Which positions the rewrite changed: the rebuilt row against the own records.
      const FloatTensor own = result.cachedKv(p.request, p.step, p.layer, p.kind);
      int64_t t = 0, d = 0;
      const std::vector<float> ownHead = headSlice(own, p.head, &t, &d);
      for (int64_t q = 0; q < std::min(t, v.cachedPositions) && d == v.headDim; ++q)
        for (int64_t j = 0; j < d; ++j)
          if (ownHead[static_cast<size_t>(q * d + j)] != v.cached[static_cast<size_t>(q * d + j)]) {
            v.rewrittenPositions.push_back(q);
            break;
          }
    }
    const std::string what =
        v.cachedFromReplay
            ? "the engine's cache row was overwritten after its records were appended; 'Cached' "
              "shows the row rebuilt from every write into its slot (it reproduces the recorded "
              "checksum)"
            : "the engine's checksum of this cache row does not match its records: rows were "
              "overwritten after they were appended, by writes the trace does not show";
    v.note = v.note.empty() ? what : v.note + "; " + what;
  }

  const detail::StepPlace place = detail::StepPlace::of(result.trace, p.request, p.step);
  if (place.step && !v.showsState) {  // a state has no positions to mark
    v.appendedFirst = place.realBefore;
    v.appendedCount = place.step->streamEntries();
  }
  v.layerMaxDiff = layerDiffs(p.request, p.step, p.kind);
  if (numerics) {
    v.layerNoiseFloor = p.kind == KvKind::Keys ? numerics->keyTolerance : numerics->valueTolerance;
    v.logitNoiseFloor = numerics->tolerance;
    // A recurrent layer's bar: its state's difference and tolerance, where the step recorded it.
    for (size_t l = 0; l < numerics->stateTolerance.size(); ++l)
      if (numerics->stateTolerance[l] > 0 && l < v.layerMaxDiff.size() && l < v.layerNoiseFloor.size()) {
        v.layerMaxDiff[l] = numerics->stateError[l];
        v.layerNoiseFloor[l] = numerics->stateTolerance[l];
      }
  }
  const auto shown = static_cast<size_t>(p.layer);
  v.diffFloor = shown < v.layerNoiseFloor.size() && v.layerNoiseFloor[shown] > 0
                    ? v.layerNoiseFloor[shown]
                    : 1e-4 * std::max(1.0, static_cast<double>(v.valueAbsMax));
  // Equal values over the common positions say nothing when the cache holds other positions
  // than the reference (a duplicate append, a skipped rollback) or lost rows to a rewrite.
  // (A ring's snapshot holds its slots, not the stream: its length is no evidence.)
  const bool ringSnapshot =
      result.trace.layerKind(p.layer).ringSlots > 0 && place.step &&
      shown < place.step->layers.size() && !place.step->layers[shown].snapshotKeys.empty();
  if (!v.cached.empty() && !v.reference.empty() && v.cachedPositions != v.referencePositions &&
      !ringSnapshot)
    v.diffStructure = "the cache holds " + std::to_string(v.cachedPositions) +
                      " positions, the reference " + std::to_string(v.referencePositions);
  else if (v.rowRewritten && !v.cachedFromReplay)
    v.diffStructure = "the cache row was overwritten after its records were appended";
  else if (shown < v.layerMaxDiff.size() && std::isinf(v.layerMaxDiff[shown]) && !ringSnapshot)
    v.diffStructure = "the layer's cache and the reference differ in shape";

  // The step's logits row against the reference row for the same real prefix.
  const RequestReference* ref = result.referenceFor(p.request);
  const TraceStep* stepRecord = place.step;
  const int64_t row = place.step ? place.realBefore + place.step->streamEntries() - 1 : -1;
  const float* refRow = ref ? ref->logitsAt(row) : nullptr;
  if (refRow && stepRecord && stepRecord->logits.numel() == ref->logits.shape[1]) {
    const int64_t V = ref->logits.shape[1];
    v.logitDelta.resize(static_cast<size_t>(V));
    for (int64_t x = 0; x < V; ++x) {
      const float delta = stepRecord->logits.data[static_cast<size_t>(x)] - refRow[x];
      v.logitDelta[static_cast<size_t>(x)] = delta;
      v.maxAbsLogitDelta = std::max(v.maxAbsLogitDelta, static_cast<double>(std::abs(delta)));
    }
  }
  v.findings = findingsAt(p.request, p.step);
  if (p.layer >= 0 && static_cast<size_t>(p.layer) < output_->layerKinds.size())
    v.layerKind = output_->layerKinds[static_cast<size_t>(p.layer)];
  return v;
}

std::optional<InspectionPoint> Inspector::firstDivergence() const {
  const FirstDivergence& fd = output_->result.report.firstDivergence;
  if (!fd.present) return std::nullopt;
  InspectionPoint p;
  p.request = fd.request;
  p.step = fd.step;
  p.layer = std::max<int64_t>(fd.layer, 0);
  p.autoHead = p.autoKind = true;
  return clamp(p);
}

InspectionPoint Inspector::locate(const Finding& finding) const {
  InspectionPoint p;
  const FirstDivergence& fd = output_->result.report.firstDivergence;
  p.request = finding.request >= 0 ? finding.request : std::max<int64_t>(fd.request, 0);
  p.step = finding.step >= 0 ? finding.step : std::max<int64_t>(fd.step, 0);
  p.layer = finding.layer >= 0 ? finding.layer : std::max<int64_t>(fd.layer, 0);
  p.autoHead = p.autoKind = true;
  return clamp(p);
}

const RequestTimeline& Inspector::timeline(int64_t request) const {
  auto it = timelines_.find(request);
  return it == timelines_.end() ? noTimeline_ : it->second;
}

std::vector<Finding> Inspector::findingsAt(int64_t request, int64_t step) const {
  std::vector<Finding> out;
  for (const Finding& f : output_->result.report.findings)
    if (f.request == request && f.step == step) out.push_back(f);
  return out;
}

int64_t Inspector::referenceRow(int64_t request, int64_t step) const {
  const detail::StepPlace place = detail::StepPlace::of(output_->result.trace, request, step);
  return place.step ? place.realBefore + place.step->streamEntries() - 1 : -1;
}

std::string Inspector::tokenLabel(int64_t request, int64_t tokenId) const {
  return detail::TimelineBuilder::tokenLabel(*output_, request, tokenId);
}

}  // namespace kvscope
