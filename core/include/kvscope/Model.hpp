// A loaded causal LM (GPT-2 or the Llama family) computing exactly what HuggingFace
// transformers computes in float32 eager mode. The public API carries plain values only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/Checkpoint.hpp"
#include "kvscope/ExpertRouting.hpp"
#include "kvscope/FloatTensor.hpp"
#include "kvscope/KvQuantization.hpp"
#include "kvscope/MemoryBudget.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/RecurrentStates.hpp"
#include "kvscope/TensorSink.hpp"

namespace kvscope {

/// The uncached reference over one token stream (audit stage 1).
struct ReferenceRun {
  std::vector<int64_t> ids;
  FloatTensor logits;                     // [T - logitsFrom, V]: positions logitsFrom..T-1
  int64_t logitsFrom = 0;                 // the first position with a logits row (ReferenceKeep)
  std::vector<FloatTensor> hiddenStates;  // numLayers + 1 entries of [T, H] (HF hidden_states)
  std::vector<FloatTensor> keys;          // per layer [h_kv, T, d] as a cache would hold them
  std::vector<FloatTensor> values;        // per layer [h_kv, T, d]
  // A recurrent (Gated DeltaNet) layer's state after the T tokens, where its keys and values
  // are empty: the conv's last inputs [C, K] and the recurrent state [Hv, Dk, Dv]; empty for
  // the attention layers.
  std::vector<FloatTensor> convStates, recurrentStates;
  // The same after the first n tokens, for each n of reference()'s statesAfter:
  // statesAt[n] = {conv per layer, recurrent per layer} (empty tensors on attention layers).
  std::map<int64_t, RecurrentStates> statesAt;
  uint64_t weightsVersion = 0;
  /// A pass given an ExpertGuide: every token and layer where the engine's experts differed
  /// from the pass's own top-k, and whether it took them (a near tie).
  std::vector<RoutingDecision> routing;
  int64_t passes = 1;  // forwards it took: 2 where LongRoPE's prefill rows need their own
  /// Where the weights do not all fit in the memory beside the pass: what it read from the
  /// disk (MemoryNeed::check's note); empty otherwise.
  std::string memoryNote;
};

/// What a reference pass keeps besides its K/V records. An audit compares the logits rows of
/// the positions that chose tokens: a long prompt's earlier rows are never read, and at
/// 8,192 positions of a 128k vocabulary all rows are 4.2 GB (and the head's matmul over them
/// most of a pass's arithmetic), so it asks for the rows from the prompt's last on; nor does it
/// read the hidden states (what `kvscope-cli reference --out` writes).
struct ReferenceKeep {
  int64_t logitsFrom = 0;     // logits rows of positions logitsFrom.. (clamped to the last)
  bool hiddenStates = true;   // ReferenceRun::hiddenStates
};

/// What a long pass (the uncached reference of a long stream) does between layers: it
/// reports `progress(layers done, layers)` and polls `cancelled`, throwing AuditCancelled
/// when it returns true. Both may be empty.
struct PassWatch {
  std::function<bool()> cancelled;
  std::function<void(int64_t, int64_t)> progress;
};

struct ModelImpl;  // torch internals, core/src/model/ModelImpl.hpp

class Model {
 public:
  /// Loads a checkpoint directory (see Checkpoint). Weight matrices stay memory-mapped in
  /// their stored dtype (F32, BF16 or F16; compute is float32, upcasting as it reads);
  /// only vectors (norms, biases) are converted. Throws InputError naming the file and
  /// tensor for a missing tensor or a wrong shape.
  static std::shared_ptr<Model> load(const std::string& dir);
  ~Model();

  const ModelConfig& config() const;
  const Checkpoint& checkpoint() const;
  const std::string& fingerprint() const;
  /// fingerprint(), calling `progress(bytes hashed, total bytes)` about five times a second
  /// while the content hash still runs (not at all when it came from the cache).
  const std::string& fingerprint(const std::function<void(uint64_t, uint64_t)>& progress) const;
  /// "F32", "F16", "BF16" or "mixed": what the checkpoint stores (compute is float32).
  const std::string& storedDtype() const;
  int64_t embeddingRows() const;  // rows of the input embedding (>= config vocab_size)

  /// Version of the in-memory weights: 0 as loaded, +1 per applyWeightUpdate.
  uint64_t weightsVersion() const;
  /// Adds `scale` * (deterministic noise with the tensor's own std, from `seed`) to one
  /// weight tensor (an RL-style refit). Copies that tensor first; the file is untouched.
  void applyWeightUpdate(const std::string& tensorName, float scale, uint64_t seed = 0);
  /// Names of weight tensors (as in the checkpoint), for choosing an update target.
  std::vector<std::string> weightNames() const;

  /// One uncached pass over `ids` (inference mode). Throws UsageError for ids outside the
  /// embedding, ContextLimitError for a prompt longer than the context, and
  /// OutOfMemoryError (before allocating) when the pass cannot fit in memory.
  /// With a quantised `cache` (KvQuantization), every K/V entry is rounded as that cache
  /// stores it before the attention reads it: the uncached reference of a correct
  /// quantised cache (records and logits then include the rounding).
  /// `watch` reports progress and cancels between layers.
  /// `prefill`: how many of `ids` the run fed in its first forward (-1: all of them). A RoPE
  /// whose frequencies switch with the forward's length (LongRoPE past its original context)
  /// turns each row as the full-prefix recompute of the step that fed it did: the prefill's
  /// rows with the set of a forward of `prefill` tokens, each later row p with that of a
  /// forward of p + 1.
  /// `experts` (a mixture of experts): another engine's expert choices, taken where the
  /// pass's own router cannot tell them from its own (kvscope/ExpertRouting.hpp).
  /// `statesAfter`: a model with recurrent layers: the stream lengths n after which the run
  /// keeps each recurrent layer's state (ReferenceRun::statesAt), ascending, each in 1..T.
  /// `keep`: which logits rows and whether the hidden states are kept (default: all).
  ReferenceRun reference(const std::vector<int64_t>& ids, const KvQuantization& cache = {},
                         const PassWatch& watch = {}, int64_t prefill = -1,
                         const ExpertGuide* experts = nullptr,
                         const std::vector<int64_t>& statesAfter = {}, const ReferenceKeep& keep = {}) const;
  /// Same pass, reporting every named tensor to `sink` (batch dimension 1).
  FloatTensor referenceWithTaps(const std::vector<int64_t>& ids, TensorSink& sink) const;
  /// What reference() over `tokens` tokens needs in memory, keeping what `keep` says.
  MemoryNeed referenceMemory(int64_t tokens, const ReferenceKeep& keep = {}) const;
  /// Throws OutOfMemoryError naming the figures when reference() over `tokens` cannot fit;
  /// returns MemoryNeed::check's note (the weights streamed from the disk), empty otherwise.
  std::string checkReferenceMemory(int64_t tokens, const ReferenceKeep& keep = {}) const;

  ModelImpl& impl() const { return *impl_; }

 private:
  Model() = default;
  ReferenceRun referenceUnchecked(const std::vector<int64_t>& ids, const KvQuantization& cache,
                                  const PassWatch& watch, int64_t prefill, const ExpertGuide* experts,
                                  const std::vector<int64_t>& statesAfter, const ReferenceKeep& keep) const;
  /// One uncached forward over `ids` (referenceUnchecked joins two for LongRoPE).
  ReferenceRun onePass(const std::vector<int64_t>& ids, const KvQuantization& cache,
                       const PassWatch& watch, const ExpertGuide* experts,
                       const std::vector<int64_t>& statesAfter = {}, const ReferenceKeep& keep = {}) const;
  FloatTensor referenceWithTapsUnchecked(const std::vector<int64_t>& ids, TensorSink& sink) const;
  std::unique_ptr<ModelImpl> impl_;
};

}  // namespace kvscope
