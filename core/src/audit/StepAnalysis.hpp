// What the audit measured for one recorded step, before any diagnosis.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audit/RingMapCheck.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct StepAnalysis {
  const TraceStep* step = nullptr;
  uint64_t version = 0;
  // Stream alignment: per fed entry, its index in prompt + generated (-1: padding/extra).
  std::vector<int64_t> streamIndex;
  int64_t cacheRealBefore = 0;       // real entries in the cache before the step
  bool streamMismatch = false;       // fed tokens differ from the request's own stream
  bool duplicatedPrevious = false;   // the previous stream token was fed again
  // Positions: recorded minus expected (expected = real entries in the cache before it).
  bool positionsOk = true;
  int64_t positionOffset = 0;        // first nonzero offset
  int64_t expectedPosition = -1;     // at the first offset
  int64_t recordedPosition = -1;
  bool beyondContext = false;        // a position >= max positions was used
  int64_t beyondPosition = -1;
  // Cache structure, per layer.
  std::vector<int64_t> appended;     // entries appended (records' t extent)
  std::vector<int64_t> lengthBefore, lengthAfter;
  int64_t fedCount = 0;              // entries fed (padding included)
  int duplicateLayer = -1;           // first layer whose append exceeds the fed entries
  int lengthMismatchLayer = -1;      // cache length != entries consumed
  // Speculative decoding: rejected drafts fed last; a layer whose cache length after the
  // step still counts them skipped the rollback.
  int64_t rejected = 0;
  int rollbackLayer = -1;            // first layer that kept its rejected drafts' rows
  std::vector<int> rollbackLayers;   // every such layer
  // Ring caches (layer_kinds ring_slots): the first ring layer whose slot map disagrees with
  // the positions fed, or whose checksum disagrees with the records its map places.
  int ringLayer = -1;
  RingMapProblem ringProblem;
  int64_t ringMapsChecked = 0;       // ring layers whose slot map this step recorded
  // Prefix caching: the step's first `reused` records are entries taken from the prefix cache
  // (stream positions 0..reused-1); the first layer and position where one differs from the
  // request's own reference, and per layer the largest such difference.
  int64_t reused = 0;
  int reusedBadLayer = -1;
  int64_t reusedBadPosition = -1;
  std::vector<double> reusedError;
  int rewrittenLayer = -1;           // checksum/snapshot: earlier rows changed (first layer)
  std::vector<int64_t>
      rewrittenColumns;  // with snapshots: which cache entries of that layer changed
  std::vector<int64_t> rewrittenStream;  // their stream indices (-1: padding or unknown)
  std::vector<int> rewrittenLayers;      // every layer whose earlier rows changed
  bool versionMix = false;           // records of several weights versions in one cache
  bool staleOnset = false;           // the first such step of this cache (where the evidence is)
  uint64_t oldestVersion = 0;
  // Value evidence for a stale cache (max |row - reference| over every layer): the reused
  // rows against the old and the new weights' reference, the fresh rows against the new.
  bool staleValuesChecked = false;
  std::string staleNotChecked;  // why not, when a reference was missing
  double reusedVsOld = 0.0, reusedVsNew = 0.0, freshVsNew = 0.0, staleTolerance = 0.0;
  int64_t reusedRows = 0;
  // Values against the reference.
  std::vector<double> keyError, valueError, keyTol, valueTol;
  int firstBadLayer = -1;
  int64_t firstBadColumn = -1;       // fed entry index of the first bad record (pads included)
  int64_t firstBadRealOrdinal = -1;  // the same counted over real entries only
  int64_t firstBadStreamIndex = -1;
  // Recurrent layers whose state the step recorded, per layer: the largest |state - reference|
  // (conv and recurrent state) and its tolerance (0: not compared); the first layer beyond it.
  std::vector<double> stateError, stateTol;
  int firstBadStateLayer = -1;
  int64_t statesCompared = 0;  // recurrent layers whose state was compared at this step
  int64_t stateLength = 0;     // the stream length the states were compared after
  double logitError = 0.0;
  double logitTol = 0.0;
  double top2Margin = 0.0;
  int64_t referenceToken = -1;
  bool logitsCompared = false;
  bool logitsDiverged = false;
  bool referenceMissing = false;  // no reference for this step's weights version
  std::string referenceMissingReason;

  bool structural() const {
    return streamMismatch || duplicatedPrevious || !positionsOk || duplicateLayer >= 0 ||
           rewrittenLayer >= 0 || versionMix || beyondContext || rollbackLayer >= 0 ||
           ringLayer >= 0 || reusedBadLayer >= 0;
  }
  bool diverged() const {
    return structural() || firstBadLayer >= 0 || firstBadStateLayer >= 0 || logitsDiverged || lengthMismatchLayer >= 0;
  }
  /// Whether the first divergence at this step is a recurrent layer's state: one beyond
  /// tolerance below every wrong K/V record.
  bool stateFirst() const { return firstBadStateLayer >= 0 && (firstBadLayer < 0 || firstBadStateLayer < firstBadLayer); }
  int64_t lastRealStreamIndex() const;
  /// Real entries among the first `column` fed entries (padding columns do not count).
  int64_t realOrdinal(int64_t column) const;
};

}  // namespace kvscope::detail
