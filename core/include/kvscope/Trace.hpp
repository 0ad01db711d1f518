// A recorded generation run: for every request and step, what was fed, at which
// positions, the logits row, the chosen token and its policy state, and per layer the K/V
// records appended (plus optional full cache snapshots, which is all some engines can
// dump). Storage grows O(T) without snapshots. File format: docs/trace-format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kvscope/ExpertRouting.hpp"
#include "kvscope/FaultSpec.hpp"

#include "kvscope/FloatTensor.hpp"
#include "kvscope/KvQuantization.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/SamplingPolicy.hpp"

namespace kvscope {

struct TraceModelInfo {
  std::string fingerprint;       // Checkpoint::fingerprint(), empty when unknown
  std::string architecture;      // gpt2 | llama | mistral | qwen2 | other engines' names
  std::string directory;         // informational
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;           // a key record's width
  int64_t valueHeadDim = 0;      // a value record's where it differs (MLA: the roped key part
                                 // beside the latent keys; file field value_head_dim); 0: headDim
  int64_t vocabSize = 0;
  int64_t maxPositions = 0;
  std::string storedDtype;       // F32 / F16 / BF16 (as stored)
  std::string computeDtype = "float32";
  /// model.rope_parameters: the RoPE scaling the engine was configured with (written for a
  /// RoPE model whose scaling is not default; absent: unknown). The audit's rope_scaling
  /// evidence reads it in trace+trace mode; model modes take the checkpoint's.
  std::optional<RopeConfig> rope;
  /// model.latent_records "heads": a latent-attention (MLA) model recorded as each head's
  /// decompressed key [num_kv_heads = heads, s, qk_nope + qk_rope] and value [.., v_head_dim],
  /// what a decompressing engine caches (transformers 4.x); absent or "latent": the latent rows
  /// and roped key parts (transformers 5, docs/trace-format.md "Latent attention").
  bool latentHeads = false;
  bool operator==(const TraceModelInfo& o) const;
  /// A value record's width: valueHeadDim, else headDim.
  int64_t valueDim() const { return valueHeadDim > 0 ? valueHeadDim : headDim; }
  /// The shape fields of a model of `config` (architecture, layers, heads, kv heads, head
  /// size, vocabulary, positions); fingerprint, directory and dtypes are the caller's.
  /// `latentHeads` (a latent-attention model only): the records as each head's decompressed
  /// key and value (model.latent_records "heads") instead of the latent rows the model caches.
  static TraceModelInfo ofConfig(const ModelConfig& config, bool latentHeads = false);
};

struct TraceRequest {
  int64_t id = 0;
  std::vector<int64_t> promptIds;
  std::string promptText;
  SamplingPolicy policy;
  int64_t maxNewTokens = 0;
  std::vector<int64_t> eosIds;
  std::vector<int64_t> generated;
  std::string stopReason;        // eos | max_new_tokens | context_limit | stale_cache | running
  int64_t arrivalTick = 0;
  int64_t batchGroup = -1;       // >= 0: prefilled as one left-padded batch with the group
  bool operator==(const TraceRequest& o) const;
  /// The request's token stream: prompt then generated tokens (what an uncached reference
  /// recomputes; index i sits at position i).
  std::vector<int64_t> stream() const;
};

/// One model layer's attention and cache (file field "layer_kinds", docs/trace-format.md).
struct TraceLayerKind {
  int64_t window = 0;     // 0: full attention; W > 0: a query sees the last W cache entries
  int64_t ringSlots = 0;  // > 0: the layer's cache is a ring of this many physical slots
  int64_t chunk = 0;      // C > 0: a query sees only the keys of its own chunk of C positions
                          // (Llama 4's chunked attention; window 0)
  bool recurrent = false;  // the layer keeps a recurrent state (Gated DeltaNet), no K/V records
  bool latent = false;     // multi-head latent attention (DeepSeek): its keys are latent rows
                           // (c_kv), its values the roped key parts (k_pe, model.value_head_dim)
  bool operator==(const TraceLayerKind& o) const {
    return window == o.window && ringSlots == o.ringSlots && chunk == o.chunk && recurrent == o.recurrent &&
           latent == o.latent;
  }
  bool ring() const { return ringSlots > 0; }
};

struct TraceLayerRecord {
  int64_t cacheLength = 0;       // records in this layer's cache after the step (pads included;
                                 // a ring layer: its occupied slots)
  FloatTensor keys;              // [h_kv, s, d] records appended by this step
  FloatTensor values;            // [h_kv, s, d]
  std::optional<uint64_t> keyChecksum;    // XXH3-64 of the whole cache row [h_kv, t, d] after
  std::optional<uint64_t> valueChecksum;  // the step (little-endian float32), when recorded
  FloatTensor snapshotKeys;      // optional full cache [h_kv, t, d] after the step
  FloatTensor snapshotValues;
  // A ring layer: the position id each physical slot holds after the step (-1: empty or
  // padding), when recorded; empty otherwise.
  std::vector<int64_t> ringPositions;
  // A recurrent layer (layer_kinds "recurrent"): its state after the step, when recorded: the
  // causal conv's last K inputs [C, K] and the recurrent state [Hv, Dk, Dv]; empty otherwise.
  FloatTensor convState, recurrentState;
  bool operator==(const TraceLayerRecord& o) const;
  /// How many of the `appended` records the cache still holds after the step, given its
  /// length before: fewer when the cache length says a rollback trimmed the step's tail
  /// (rejected draft tokens), otherwise all of them. What the cache held is what views show.
  int64_t keptRecords(int64_t lengthBefore, int64_t appended) const;
};

struct TraceStep {
  int64_t request = 0;
  int64_t step = 0;              // 0 = prefill, k = feeding generated token k-1
  int64_t tick = 0;              // engine clock (orders steps of different requests)
  int64_t slot = 0;              // cache row the engine used
  std::vector<int64_t> fedIds;   // tokens fed (pads included for left-padded batches)
  std::vector<int64_t> positions;  // position ids used, one per fed token
  std::vector<uint8_t> fedMask;  // 1 real token, 0 padding; empty = all real
  FloatTensor logits;            // [V] the row that chose the token (empty if none)
  int64_t chosenToken = -1;      // -1: no token (e.g. context limit)
  uint64_t rngDrawsBefore = 0;
  uint64_t rngDrawsAfter = 0;
  uint64_t weightsVersion = 0;   // weights the forward used
  std::vector<TraceLayerRecord> layers;  // one per layer (empty when not recorded)
  std::vector<std::string> events;       // arrival, weight_update, cache_rebuilt, context_limit, eos
  // Speculative decoding: the last `draftCount` fed entries are draft tokens the step's
  // forward verified; the first `acceptedCount` of them were accepted (they are stream
  // tokens, in the request's `generated` before `chosenToken`), the rest were rejected: not
  // part of the stream, and rolled back from the cache after the step.
  int64_t draftCount = 0;
  int64_t acceptedCount = 0;
  // Prefix caching: the first `reusedCount` cache entries came from the engine's prefix cache
  // (the request's first stream tokens, before the fed ones; the layer records hold them
  // first), handed over from request `reusedFrom` (-1: unknown) as blocks `reusedBlocks`.
  int64_t reusedCount = 0;
  int64_t reusedFrom = -1;
  std::vector<int64_t> reusedBlocks;
  // A mixture-of-experts model: the experts the router chose for each fed entry (one token
  // per fed entry; empty: not recorded), so that an audit can tell a near-tie routing flip
  // from a routing bug.
  ExpertChoices experts;
  bool operator==(const TraceStep& o) const;
  /// Fed entries that are rejected draft tokens (draftCount - acceptedCount).
  int64_t rejectedCount() const;
  /// Whether the step starts its request's cache over (a `cache_reset` event: an uncached
  /// engine recomputing the prefix, a cache rebuilt): the one test for it.
  bool resetsCache() const;
  /// The one rule for padding. Fed entry i is a real token unless the mask marks it 0 or it
  /// is one of the trailing rejected draft tokens.
  bool isRealEntry(size_t i) const;
  int64_t realFedCount() const;
  /// The stream entries the step adds to its request's cache: the prefix-cache entries it
  /// reused (the stream's first ones), then its real fed tokens. The one rule for where a
  /// step's entries sit in the stream.
  int64_t streamEntries() const { return reusedCount + realFedCount(); }
  /// Which of a layer's `records` appended entries are real tokens: the mask applies when
  /// it has one entry per record; when a layer appended a different number of records than
  /// were fed (a duplicate append) or there is no mask, every record counts as real.
  std::vector<int64_t> realColumns(int64_t records) const;
  /// realColumns over the fed entries themselves.
  std::vector<int64_t> realColumns() const;
};

struct TraceEvent {
  int64_t tick = 0;
  std::string kind;              // weight_update | arrival | context_limit | note
  std::string detail;
  uint64_t weightsVersion = 0;   // version after the event
  std::string tensor;            // weight_update: which tensor
  double scale = 0.0;            // weight_update: noise scale
  uint64_t seed = 0;             // weight_update: noise seed
  bool operator==(const TraceEvent& o) const;
};

struct Trace {
  int formatVersion = 2;          // of the file it was read from (TraceFile writes the newest)
  std::string engine;            // who recorded it, e.g. "kvscope 0.1.0" or "hf_trace.py"
  std::string mode = "cached";   // cached | uncached
  TraceModelInfo model;
  std::vector<TraceRequest> requests;
  std::vector<TraceStep> steps;  // in recording order
  std::vector<TraceEvent> events;
  std::vector<std::string> faults;  // fault specs the built-in engine injected (for the record)
  /// Per entry of `faults`, whether and where it fired; empty: not recorded (older traces).
  std::vector<FaultFiring> faultFirings;
  KvQuantization kvCache;           // the cache's element type when it is quantised (fp8, int8)
  std::string tensorDtype = "F32";  // how the file stores its K/V tensors (F32 | F16 | BF16);
                                    // set by TraceFile::read, not part of equality
  // The model layers the trace holds K/V records for (a minimized trace keeps a few),
  // strictly increasing, each < model.numLayers; empty = all of them. Steps' `layers`
  // stay indexed by model layer (model.numLayers entries): an absent layer's records are
  // empty and nothing about it may be checked or reported as ok. File field:
  // "recorded_layers" (docs/trace-format.md).
  std::vector<int64_t> recordedLayers;
  // Per model layer its attention window and ring cache (file field "layer_kinds"); empty:
  // not declared (every layer full, or unknown).
  std::vector<TraceLayerKind> layerKinds;

  bool operator==(const Trace& o) const;
  const TraceRequest* findRequest(int64_t id) const;
  /// The other requests of `request`'s batch group (empty: it ran alone, or is unknown).
  std::vector<int64_t> batchMatesOf(int64_t request) const;
  /// Steps of one request, in step order.
  std::vector<const TraceStep*> stepsOf(int64_t request) const;
  /// Per step of stepsOf(request): the stream entries the request's cache holds after it
  /// (TraceStep::streamEntries summed; a step with a cache_reset event starts over). What a
  /// recurrent layer's state after the step has consumed.
  std::vector<int64_t> streamHeldAfter(int64_t request) const;
  bool hasSnapshots() const;
  /// The one rule for a layer subset: whether the trace holds layer `layer`'s records.
  bool hasLayer(int64_t layer) const;
  /// Whether the trace holds K/V records of layer `layer` to check: a layer it holds
  /// (hasLayer) that is not recurrent (a state, no rows). The one rule the audit asks.
  bool holdsRows(int64_t layer) const { return hasLayer(layer) && !layerKind(layer).recurrent; }
  /// The trace's recurrent layers (layer_kinds), in order.
  std::vector<int64_t> recurrentLayers() const;
  /// The model layers the trace holds, in order: recordedLayers, or 0..numLayers-1.
  std::vector<int64_t> layerIndices() const;
  /// Whether the trace holds only some of the model's layers.
  bool isLayerSubset() const { return !recordedLayers.empty(); }
  /// Layer `layer`'s declared kind (full when undeclared).
  TraceLayerKind layerKind(int64_t layer) const;
  /// The trace's layers whose cache is a ring, in order (the rows of `ring_positions`).
  std::vector<int64_t> ringLayers() const;
};

/// What a check says for a layer the trace does not hold:
/// "not checked: layer N not in the trace (minimized)".
std::string layerNotInTraceNote(int64_t layer);
/// "layers 1, 3 of 4" / "all 4 layers": a trace's layers in words.
std::string describeTraceLayers(const Trace& trace);

std::ostream& operator<<(std::ostream& os, const TraceStep& s);

/// XXH3-64 over a float buffer's little-endian bytes (the trace checksum).
uint64_t traceChecksum(const float* data, size_t count);
/// The checksum of a cache row held per kv head ([h_kv][t * d], heads in order): what
/// TraceLayerRecord::keyChecksum / valueChecksum record. A recorded checksum that differs
/// from the row the request's records rebuild means rows were rewritten in place.
uint64_t traceRowChecksum(const std::vector<std::vector<float>>& heads);

}  // namespace kvscope
