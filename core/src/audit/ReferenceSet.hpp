// The references an audit compares against, per (request, weights version): from a model
// (one teacher-forced uncached pass over the request's own stream, with the trace's
// weight updates replayed for later versions) or from another trace (trace+trace mode).
// A trace that declares a quantised cache gets a model reference whose K/V entries are
// rounded the same way (Model::reference): what a correct quantised cache holds.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <utility>

#include "kvscope/AuditResult.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Trace.hpp"
#include "model/AttentionFeature.hpp"

namespace kvscope::detail {

/// What an audit hypothesis changes in an uncached pass (ReferenceSet::hypothesis).
struct PassHypothesis {
  /// Layers rotating their queries and keys at other position ids (one per id).
  std::map<int64_t, std::vector<int64_t>> layerPositions;
  /// Per feature (the soft-cap, the sinks): layers computing their attention without it
  /// from this query index on.
  std::map<AttentionFeature, std::map<int64_t, int64_t>> droppedFrom;
  /// Chunked layers masked as a sliding window of their chunk's size (the chunk_mask row).
  std::set<int64_t> chunkAsWindow;
  /// Layers reading their no_rope_layers entry inverted (the nope_layer_rope row), and whether
  /// their chunking flips with it.
  std::set<int64_t> ropeFlipped;
  bool chunksFlip = false;
  /// The query temperature taken this many positions later (the temperature_position row).
  int64_t temperatureShift = 0;
  /// The recurrent layers restarting from a zero state at this stream index (the prefix_state
  /// row: a prefix hit that reused the attention rows but not the state); -1: none.
  int64_t stateRestart = -1;
};

class ReferenceSet {
 public:
  /// Model mode. Versions > 0 come from `weightsDirectories` (version -> checkpoint
  /// directory), or are replayed from the trace's weight-update events.
  ReferenceSet(const Model& model, const Trace& trace,
               std::map<uint64_t, std::string> weightsDirectories = {});
  /// Trace mode: `reference` is an uncached (or trusted) trace of the same requests. Its K/V
  /// records move into the references get() builds (a request's records are freed once its
  /// reference holds them): nothing else may read them afterwards.
  explicit ReferenceSet(std::shared_ptr<Trace> reference);

  /// The reference for `request` at `version` covering at least `tokens` stream tokens;
  /// nullptr when it cannot be computed (the reason is in `unavailableReason`).
  const RequestReference* get(int64_t request, uint64_t version, const std::vector<int64_t>& stream);
  const std::string& unavailableReason() const { return reason_; }
  /// Moves a reference get() returned out of the set (the audit's result keeps it; a long
  /// run's reference is gigabytes, never copied). `ref` is not valid afterwards, and a later
  /// get() for it computes it again.
  RequestReference release(const RequestReference* ref);
  /// Model mode: what the uncached passes get() computes report and poll (Model::reference).
  void watchPasses(PassWatch watch) { watch_ = std::move(watch); }
  /// Model mode, a mixture of experts whose trace records expert choices: get()'s passes take
  /// the engine's experts where they lie within `margin` of their own (ExpertGuide).
  void followExperts(std::function<double(int64_t, int64_t, double)> margin) {
    expertMargin_ = std::move(margin);
  }
  /// Layer-0 keys of `token` at positions 0..count-1 ([count, h, d] as FloatTensor), model
  /// mode only (empty otherwise).
  FloatTensor probeLayer0(int64_t token, int64_t count, uint64_t version);
  /// Model mode only: `layer`'s per-head key-norm weight [d] (the checkpoint's k_norm) at
  /// `version`; empty when the checkpoint has none or in trace+trace mode.
  FloatTensor keyNormWeight(int64_t layer, uint64_t version);
  bool hasModel() const { return model_ != nullptr; }
  /// Model mode: the uncached forwards this set ran so far: the references get() computed
  /// (one per request and weights version, a quantised cache's unrounded twin, LongRoPE's
  /// prefill pass) and the re-derivations the diagnosis asked for (branch, hypothesis).
  struct PassCount {
    int64_t references = 0;
    int64_t referenceTokens = 0;  // positions those passes computed, summed
    int64_t rederivations = 0;
  };
  const PassCount& passes() const { return passes_; }
  /// Model mode: where the weights did not all fit beside a reference pass, what it read
  /// from the disk (the first such pass's MemoryNeed note); empty otherwise.
  const std::string& memoryNote() const { return memoryNote_; }
  /// The checkpoint's configuration (its RoPE scaling, ...); nullptr in trace+trace mode.
  const ModelConfig* modelConfig() const { return model_ ? &model_->config() : nullptr; }
  /// Model mode only: an uncached pass over `ids` (e.g. a stream prefix followed by a
  /// speculative step's rejected drafts) with the weights of `version`; nullptr otherwise.
  std::unique_ptr<ReferenceRun> branch(const std::vector<int64_t>& ids, uint64_t version);
  /// Model mode only: the K/V records (no logits) of an uncached pass over `ids` at the
  /// position ids `positions` (one per id), with the layers in `layerPositions` rotating
  /// their queries and keys at other ids (RoPE models): what an engine with those positions
  /// computes, rounded as the trace's cache is; nullptr otherwise.
  std::unique_ptr<ReferenceRun> positioned(
      const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
      const std::map<int64_t, std::vector<int64_t>>& layerPositions, uint64_t version);
  /// Model mode only: the K/V records and logits of an uncached pass over `ids` at
  /// `positions` with `change` applied, rounded as the trace's cache is, and the recurrent
  /// layers' states after it; nullptr otherwise (also when a position is beyond the context).
  std::unique_ptr<ReferenceRun> hypothesis(const std::vector<int64_t>& ids,
                                           const std::vector<int64_t>& positions,
                                           const PassHypothesis& change, uint64_t version);

 private:
  const Model* modelFor(uint64_t version);
  /// The reference's records in the layout the trace holds them: with model.latent_records
  /// "heads", each latent layer's rows decompressed per head (ModelImpl::decompressedHeads).
  void inTraceLayout(const Model& m, ReferenceRun& run) const;
  RequestReference fromTrace(int64_t request, const std::vector<int64_t>& stream);

  const Model* model_ = nullptr;
  const Trace* trace_ = nullptr;
  std::shared_ptr<Trace> referenceTrace_;
  std::map<uint64_t, std::shared_ptr<Model>> updated_;  // weights versions > 0
  std::map<uint64_t, std::string> directories_;         // version -> checkpoint given by the user
  std::map<std::pair<int64_t, uint64_t>, RequestReference> cache_;
  std::map<std::pair<int64_t, uint64_t>, size_t>
      requested_;  // stream length each entry was computed for
  std::string reason_;
  PassWatch watch_;
  std::function<double(int64_t, int64_t, double)> expertMargin_;
  PassCount passes_;
  std::string memoryNote_;
};

/// The engine's expert choices for `request`'s stream tokens as a guide for its reference
/// (each real fed entry that is the stream token at its place; -1 elsewhere); slots 0 when
/// the trace records none for it.
/// The stream lengths after which `request`'s steps recorded their recurrent layers' states
/// (what the reference keeps its states after), ascending; empty without recorded states.
std::vector<int64_t> stateLengths(const Trace& trace, int64_t request);

ExpertGuide expertGuideOf(const Trace& trace, const TraceRequest& request,
                          const std::vector<int64_t>& stream);

}  // namespace kvscope::detail
