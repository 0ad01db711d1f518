#include "kvscope/FailureMatrix.hpp"

#include <stdexcept>

namespace kvscope {

const std::vector<FailureMatrixRow>& FailureMatrix::rows() {
  static const std::vector<FailureMatrixRow> table = {
      {finding::Reference, "the uncached reference itself is wrong or does not fit the run",
       "checkpoint, vocabulary and tokenizer"},
      {finding::Position, "mismatch begins at a token together with a position offset",
       "position index or token ownership", MatrixOrigin::Method},
      {finding::WrongLayer, "layer 1 matches, layer 2 differs", "layer 2's cache source and append",
       MatrixOrigin::Method},
      {finding::DuplicateAppend, "cache length grows by two in one step",
       "duplicate append or a duplicated prompt token", MatrixOrigin::Method},
      {finding::CrossRequest, "a batch row changes when another request arrives",
       "cache mixing across the batch or request axes", MatrixOrigin::Method},
      {finding::TieRule, "greedy token differs but logits match", "policy or tie rule",
       MatrixOrigin::Method},
      {finding::RngOrder, "sampled runs differ but probabilities match", "seed and RNG call order",
       MatrixOrigin::Method},
      {finding::StaleCache, "cache works until the weights update", "stale projected K/V",
       MatrixOrigin::Method},
      {finding::ContextLimit, "a generated token cannot be fed back", "context limit reached",
       MatrixOrigin::Method},
      {finding::SlidingWindow, "divergence starts once the sequence outgrows the sliding window",
       "window trimming and its off-by-one"},
      {finding::Drift, "cached and uncached logits differ within the dtype's precision noise",
       "nothing: precision drift, not a cache bug"},
      // KV Scope's additions (docs/audit.md).
      {finding::SpeculativeRollback,
       "after speculative decoding the cache length exceeds the accepted tokens by the rejected "
       "drafts",
       "the rollback (cache trim) after draft verification"},
      {finding::KvQuantization,
       "a quantised cache's records sit more than a quantisation step from the projection",
       "the quantisation scale and element type of the cache"},
      {finding::RopeScaling, "key error grows with position while values at layer 0 are exact",
       "the RoPE scaling (rope_scaling factor and type) of the path that computed the keys"},
      {finding::ChunkPosition,
       "first chunk exact; from a chunk boundary on, layer-0 keys equal the same tokens' at "
       "other positions",
       "the position ids of each prefill chunk (they must continue from the cache's length)"},
      {finding::BatchVariance,
       "a request's logits differ from its solo run at float noise once it runs batched, with "
       "no structural or cache-row evidence",
       "the batch-invariance of the kernels (reductions whose split or order depends on the "
       "batch size)"},
      {finding::PrefixReuse,
       "a prefix-cache hit's reused rows equal another request's reference inside the hit span "
       "while the rows outside it are right",
       "the prefix cache's block key and lookup (hash collision, partial block match, a block "
       "entered before it was written)"},
      {finding::WindowWrap,
       "once a ring-buffer window cache wraps, its slot map loses a position the next query "
       "needs (on sliding layers only)",
       "the ring's slot arithmetic after the wrap (which slot an entry is written to and read "
       "from)"},
  };
  return table;
}

const FailureMatrixRow& FailureMatrix::row(const std::string& id) {
  for (const auto& r : rows())
    if (r.id == id) return r;
  throw std::out_of_range("unknown finding id '" + id + "'");
}

}  // namespace kvscope
