#include "inspect/LayerDiffs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "inspect/CacheRowReplay.hpp"
#include "inspect/StepPlace.hpp"

namespace kvscope::detail {

std::vector<double> LayerDiffs::compute(const AuditResult& result, int64_t request, int64_t step,
                                        KvKind kind) {
  std::vector<double> diffs = result.layerMaxDiff(request, step, kind);
  applyRewrittenRows(result, request, step, kind, &diffs);
  return diffs;
}

bool LayerDiffs::extend(const AuditResult& result, int64_t request, int64_t step, KvKind kind,
                        const std::vector<double>& previous, std::vector<double>* out) {
  const RequestReference* ref = result.referenceFor(request);
  if (!ref) return false;
  const int64_t layers = result.trace.model.numLayers;
  if (static_cast<int64_t>(previous.size()) != layers) return false;
  const StepPlace place = StepPlace::of(result.trace, request, step);
  const TraceStep* current = place.step;
  const int64_t before = place.realBefore;  // real tokens consumed before `step`
  if (!current || static_cast<int64_t>(current->layers.size()) < layers) return false;
  std::vector<double> diffs(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const double prevValue = previous[static_cast<size_t>(l)];
    if (!std::isfinite(prevValue)) return false;  // shapes already differ: no shortcut
    const auto& rec = current->layers[static_cast<size_t>(l)];
    const FloatTensor& r = kind == KvKind::Keys ? rec.keys : rec.values;
    const FloatTensor& full = kind == KvKind::Keys ? ref->keys[static_cast<size_t>(l)]
                                                   : ref->values[static_cast<size_t>(l)];
    if (r.shape.size() != 3 || full.shape.size() != 3) return false;
    const int64_t h = r.shape[0], s = r.shape[1], d = r.shape[2], T = full.shape[1];
    if (full.shape[0] != h || full.shape[2] != d) return false;
    const std::vector<int64_t> real = current->realColumns(s);
    if (static_cast<int64_t>(real.size()) != current->streamEntries() ||
        before + static_cast<int64_t>(real.size()) > T)
      return false;  // the cache grew differently from the reference: full comparison
    double m = prevValue;
    for (int64_t hh = 0; hh < h; ++hh)
      for (size_t k = 0; k < real.size(); ++k) {
        const float* a = r.data.data() + (hh * s + real[k]) * d;
        const float* b = full.data.data() + (hh * T + before + static_cast<int64_t>(k)) * d;
        for (int64_t j = 0; j < d; ++j) m = std::max(m, static_cast<double>(std::abs(a[j] - b[j])));
      }
    diffs[static_cast<size_t>(l)] = m;
  }
  applyRewrittenRows(result, request, step, kind, &diffs);
  *out = std::move(diffs);
  return true;
}

void LayerDiffs::applyRewrittenRows(const AuditResult& result, int64_t request, int64_t step,
                                    KvKind kind, std::vector<double>* diffs) {
  for (size_t l = 0; l < diffs->size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    if (!CacheRowReplay::rowRewritten(result.trace, request, step, layer, kind)) continue;
    const FloatTensor row = CacheRowReplay::replay(result.trace, request, step, layer, kind);
    const FloatTensor ref = result.referenceKv(request, step, layer, kind);
    if (row.empty() || ref.empty()) continue;
    (*diffs)[l] = row.shape == ref.shape ? FloatTensor::maxAbsDiff(row, ref)
                                         : std::numeric_limits<double>::infinity();
  }
}

}  // namespace kvscope::detail
