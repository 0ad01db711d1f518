// AttentionContext over the engine's KvCache for one forward of a group of requests
// (one row each, equal lengths): appends the new records, then attends over the cache.
// Fault hooks change what is written where; a quantised cache rounds what is written. A
// ring layer (RequestState::rings) attends over its slots before the forward's writes and
// the new records, then writes them into their slots (transformers' sliding-window layers).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "cache/KvCache.hpp"
#include "cache/KvQuantizer.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/RequestState.hpp"
#include "engine/StepRecorder.hpp"
#include "model/AttentionContext.hpp"

namespace kvscope::detail {

class CachedAttention : public AttentionContext {
 public:
  /// `fedMask` [B][s]: 1 real token, 0 padding; `fedPositions` [B][s]: their position ids.
  CachedAttention(KvCache& cache, std::vector<RequestState*> group,
                  std::vector<std::vector<uint8_t>> fedMask,
                  std::vector<std::vector<int64_t>> fedPositions, const FaultPlan& faults,
                  std::vector<int64_t> layerWindows, const KvQuantizer& quantizer);
  KvView attend(int64_t layer, const torch::Tensor& kNew, const torch::Tensor& vNew) override;
  void roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) override;
  bool dropsRopeScaling(int64_t layer, int64_t row) const override;
  bool normsAfterRope(int64_t layer, int64_t row) const override;
  bool flipsRope(int64_t layer, int64_t row) const override;
  bool dropsFeature(AttentionFeature feature, int64_t layer, int64_t row) const override;
  /// Every forward of a member after its prefill (step >= 1), once absorbLatentDecode(true).
  bool absorbsLatent(int64_t layer, int64_t row) const override;
  void absorbLatentDecode(bool on) { absorbLatent_ = on; }
  int64_t expertsPerToken(int64_t layer, int64_t row, int64_t topK) const override;
  bool dropsAttentionFactor(int64_t layer, int64_t row) const override;
  bool swapsLayerRope(int64_t layer, int64_t row) const override;
  bool rotatesWholeHead(int64_t layer, int64_t row) const override;
  int64_t projectionSplits(int64_t layer, int64_t row) const override;
  torch::Tensor temperaturePositions(int64_t layer, const torch::Tensor& positions) const override;
  /// A recurrent layer: each member's held state (zeros while its length is 0: a fresh
  /// sequence), kept back into its slot after the forward, its length counting the entries fed.
  RecurrentState recurrentState(int64_t layer) override;
  void keepRecurrentState(int64_t layer, const RecurrentState& next) override;
  torch::Tensor realEntries(int64_t layer) const override;
  /// A one-row forward that keeps states (keepStatesAfter: a speculative step's drafts, a
  /// prefill's prefix blocks): recurrent `layer`'s state after `length` fed entries.
  void keepStateAfter(int64_t layer, int64_t length, const RecurrentState& state) override;
  /// The state kept after `length` fed entries ([1, ...] tensors), or nullptr.
  const RecurrentState* stateAfter(int64_t layer, int64_t length) const;
  /// Every state kept: (layer, fed length) -> state.
  const std::map<std::pair<int64_t, int64_t>, RecurrentState>& keptStates() const { return keptStates_; }
  /// Per member, per layer: the cache length before this forward.
  const std::vector<std::vector<int64_t>>& lengthsBefore() const { return before_; }
  /// Member b's records per layer as its rings took them ([h, n, d] keys, values; undefined
  /// for a layer without a ring): a ring keeps them in its slots, not at their cache index.
  const RingRecords& ringRecords(size_t b) const { return ringRecords_.at(b); }

 private:
  KvCache& cache_;
  std::vector<RequestState*> group_;
  /// Writes member b's records of `layer` into its ring and returns what the layer attends
  /// over: the slots held before the forward, then the new records.
  KvView attendRing(int64_t layer, const std::vector<torch::Tensor>& ks,
                    const std::vector<torch::Tensor>& vs, int64_t s);
  /// The chunk `layer`'s mask keeps (0: none); the chunk_mask fault turns it into a sliding
  /// `window` of the chunk's size instead (noting the firing once a query of `queryOrd`
  /// [B, s] sees across a chunk's edge).
  int64_t chunkOf(int64_t layer, int64_t& window, const torch::Tensor& queryOrd) const;
  std::vector<std::vector<uint8_t>> fedMask_;
  std::vector<std::vector<int64_t>> fedPositions_;
  const FaultPlan& faults_;
  std::vector<int64_t> windows_;
  const KvQuantizer& quantizer_;  // a quantised cache stores (and so reads) rounded records
  std::vector<torch::Tensor> stashK_, stashV_;  // [layer] this forward's records, for wrong_layer
  std::vector<std::vector<int64_t>> before_;
  std::vector<RingRecords> ringRecords_;  // [member]
  std::map<std::pair<int64_t, int64_t>, RecurrentState> keptStates_;  // (layer, length) -> state
  bool absorbLatent_ = false;  // EngineOptions::mlaAbsorbedDecode
};

}  // namespace kvscope::detail
