// The data every per-step panel paints, computed on the engine thread for one selection
// from the immutable audit output: copies, never pointers into the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ui/Selection.hpp"

namespace kvscope::ui {

struct StepSnapshot {
  uint64_t outputSerial = 0;      // SelectionContext::outputSerial() it was computed for
  Selection selection;

  // The selected layer and head of the cache after the step. Buffers are [t, d] row-major
  // (index = position * headDim + dim): positions across, head dimensions down.
  int64_t headDim = 0;
  int64_t cachedPositions = 0;     // t of the cached path
  int64_t referencePositions = 0;  // t of the reference (0: no reference)
  std::vector<float> cached;       // [cachedPositions, headDim]
  std::vector<float> reference;    // [referencePositions, headDim]
  std::vector<float> absDiff;      // [min(t_cached, t_ref), headDim]
  float valueAbsMax = 0.0f;        // max |x| over cached and reference (shared colour range)
  float diffMax = 0.0f;            // max of absDiff
  int64_t diffArgPosition = -1;    // where diffMax sits
  int64_t diffArgDim = -1;

  std::vector<double> layerMaxDiff;  // [layers] whole-cache max |cached - reference| (kind)
  // The audit's own tolerance at this step (dtype, depth, position and magnitude; the same
  // numbers stage 2 and 4 judged by): below it a difference is precision noise.
  std::vector<double> layerNoiseFloor;  // [layers] for the selected kind (empty: not audited)
  double logitNoiseFloor = 0.0;         // for the logits row (0: not audited)

  std::vector<float> logitDelta;   // [V] cached - reference logits row of the step
  double maxAbsLogitDelta = 0.0;

  /// The engine's recorded checksum of this layer's cache row after the step no longer
  /// matches its appended records: rows were overwritten after they were appended (by
  /// another request or batch row), which the records themselves cannot show.
  bool rowRewritten = false;
  /// With rowRewritten: `cached` is that row rebuilt from every write into its slot
  /// (CacheRowReplay; it reproduces the recorded checksum) instead of the own records.
  bool cachedFromReplay = false;

  std::string note;                // why something is missing or shapes differ ("" = fine)
};

}  // namespace kvscope::ui
