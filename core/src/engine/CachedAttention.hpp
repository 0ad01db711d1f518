// AttentionContext over the engine's KvCache for one forward of a group of requests
// (one row each, equal lengths): appends the new records, then attends over the cache.
// Fault hooks change what is written where; a quantised cache rounds what is written.
#pragma once

#include <vector>

#include "cache/KvCache.hpp"
#include "cache/KvQuantizer.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/RequestState.hpp"
#include "model/AttentionContext.hpp"

namespace kvscope::detail {

class CachedAttention : public AttentionContext {
 public:
  /// `fedMask` [B][s]: 1 real token, 0 padding.
  CachedAttention(KvCache& cache, std::vector<RequestState*> group,
                  std::vector<std::vector<uint8_t>> fedMask, const FaultPlan& faults,
                  std::vector<int64_t> layerWindows, const KvQuantizer& quantizer);
  KvView attend(int64_t layer, const torch::Tensor& kNew, const torch::Tensor& vNew) override;
  void roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) override;
  bool dropsRopeScaling(int64_t layer, int64_t row) const override;
  int64_t projectionSplits(int64_t layer, int64_t row) const override;
  /// Per member, per layer: the cache length before this forward.
  const std::vector<std::vector<int64_t>>& lengthsBefore() const { return before_; }

 private:
  KvCache& cache_;
  std::vector<RequestState*> group_;
  std::vector<std::vector<uint8_t>> fedMask_;
  const FaultPlan& faults_;
  std::vector<int64_t> windows_;
  const KvQuantizer& quantizer_;  // a quantised cache stores (and so reads) rounded records
  std::vector<torch::Tensor> stashK_, stashV_;  // [layer] this forward's records, for wrong_layer
  std::vector<std::vector<int64_t>> before_;
};

}  // namespace kvscope::detail
