// Evidence for a chunked prefill whose positions restart (or jump) at a chunk boundary
// (chunk_position). A request's prefill spans several steps when the engine fed its prompt
// in chunks: every step before the last chooses no token, and each chunk's positions must
// continue from the cache's length. The finding is raised where a chunk after the first
// starts with the wrong positions, while the chunks before it are exact:
//   - recorded position ids that do not continue at the boundary (the engine computed them
//     per chunk), or
//   - right recorded ids, but a layer whose keys differ from the boundary on while its
//     values are exact, and an uncached pass that rotates that layer (or it and every layer
//     above) at the chunk-local positions reproduces the records.
// In model modes the chunks' records are compared with an uncached pass over the prompt at
// the positions the hypothesis names; for layer 0 that is the reference of the same token
// at the other position.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// Where a step sits in its request's chunked prefill.
struct ChunkBoundary {
  std::vector<const StepAnalysis*> chunks;  // the prefill's steps in order (two or more)
  size_t chunk = 0;                         // the step's index among them (>= 1)
  int64_t start = 0;                        // stream position of the chunk's first token
  int64_t length = 0;                       // real tokens the chunk fed
};

class ChunkPositionEvidence {
 public:
  ChunkPositionEvidence(const Trace& trace, ReferenceSet& refs, const Tolerance& tol)
      : trace_(trace), refs_(refs), tol_(tol) {}

  /// The chunk boundary `a` starts at: `a` is a chunk after the first of a chunked prefill
  /// (`steps`: every analysis of its request, in order); nullopt otherwise.
  static std::optional<ChunkBoundary> boundaryAt(const std::vector<StepAnalysis>& steps,
                                                 const StepAnalysis& a, int64_t promptLength);

  /// The recorded position ids of `b`'s chunk do not continue from the cache at its first
  /// token (onset at the boundary): the chunk_position finding; nullopt when the offset
  /// starts inside the chunk.
  std::optional<FindingDraft> fromRecordedPositions(const ChunkBoundary& b) const;

  /// The recorded ids are right but the first bad layer's keys (values exact) leave the
  /// reference at the boundary, and an uncached pass rotating that layer (then it and every
  /// layer above) at the chunk-local positions reproduces every chunk's records from the
  /// boundary on: the finding; nullopt otherwise (model modes only).
  std::optional<FindingDraft> fromValues(const ChunkBoundary& b) const;

 private:
  struct Hypothesis {
    double error = 0;      // max |record - hypothesis| over the chunks from the boundary
    double tolerance = 0;  // the largest record tolerance among them
    double layer0Key = 0;  // layer 0 alone: keys, values
    double layer0Value = 0;
  };
  /// Compares every record of the chunks from the boundary on with an uncached pass over
  /// the prompt at `positions` (one per prompt token) and `layerPositions`.
  std::optional<Hypothesis> test(
      const ChunkBoundary& b, const std::vector<int64_t>& positions,
      const std::map<int64_t, std::vector<int64_t>>& layerPositions) const;
  /// Evidence every chunk_position finding carries: chunk, chunks, boundary, the chunks
  /// before it exact.
  std::map<std::string, double> common(const ChunkBoundary& b) const;
  std::vector<int64_t> promptOf(const ChunkBoundary& b) const;

  const Trace& trace_;
  ReferenceSet& refs_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
