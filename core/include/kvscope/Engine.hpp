// The built-in cached engine: one K and one V tensor per layer with axes (B, h, t, d_h),
// preallocated, appended along t; requests with their own cache rows, positions, sampling
// state and weights version; left-padded batches; requests joining mid-decode; weight
// updates; fault injection; trace recording.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/FaultSpec.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/SamplingPolicy.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

struct RequestSpec {
  std::vector<int64_t> promptIds;
  std::string promptText;        // informational
  int64_t maxNewTokens = 16;
  SamplingPolicy policy;         // greedy by default
  int64_t arrivalTick = 0;       // engine tick at which the request joins
  int64_t batchGroup = -1;       // >= 0: prefilled and decoded as one left-padded batch
  bool stopAtEos = true;
};

struct WeightUpdateSpec {
  int64_t tick = 0;              // applied at the start of this tick
  std::string tensor;            // checkpoint tensor name
  float scale = 0.05f;
  uint64_t seed = 0;
};

struct EngineOptions {
  std::vector<FaultSpec> faults;
  std::vector<WeightUpdateSpec> weightUpdates;
  bool recordCache = true;       // per-step K/V records and checksums (off: plain generation)
  bool recordSnapshots = false;  // full per-step cache copies (O(T^2)); off by default
  bool recordChecksums = true;
  // A model with recurrent layers: record their states after the prefill and every N-th step
  // after it (the trace's state tensors, O(steps x state size)); 0: never.
  int64_t recordStatesEvery = 1;
  bool uncached = false;         // full-prefix recompute every step (the reference engine)
  // Speculative decoding: > 0 proposes that many draft tokens per decode step (prompt-lookup
  // n-gram drafts) and verifies them in one forward; greedy requests decoding alone only.
  // Rejected drafts are rolled back from the cache (the speculative_rollback fault skips it).
  int64_t speculativeDrafts = 0;
  // Chunked prefill: > 0 feeds a prompt longer than this that many tokens per forward, one
  // chunk per tick, each chunk appended to the cache and attending over it and itself at
  // the positions that continue the cache; every chunk but the last chooses no token.
  // Requests prefilled alone only (a batch group prefills whole). The chunk_position fault
  // turns it on (its `size`) when this is 0. Ignored with `uncached`.
  int64_t prefillChunk = 0;
  // A quantised KV cache (KvQuantization::dtypes(): int8, fp8_e4m3, fp8_e5m2; "" = none):
  // records are quantised per token and kv head when written and read back dequantised.
  // The kv_quantization fault turns on int8 when this is empty. With `uncached`, every
  // entry of the full-prefix pass is rounded the same way: the reference of such a cache.
  std::string kvCacheDtype;
  // Batch-invariant kernels: requests of a batch group are scheduled together (the same
  // ticks; the trace keeps their batch_group) but each one's forward is computed on its own
  // rows alone, unpadded, so its logits do not depend on its batch mates (what vLLM's
  // batch-invariant mode guarantees). The batch_variance fault turns it on.
  bool batchInvariant = false;
  // Ring-buffer sliding-window caches: every sliding layer's cache is a ring of `window`
  // slots (entry i in slot i mod window) that attends over its slots and the step's new
  // records; traces record each slot's position (docs/trace-format.md). Needs a model with a
  // sliding layer; not with speculative decoding. The window_wrap fault turns it on.
  bool ringWindow = false;
  // Prefix caching: > 0 keeps each prompt prefilled alone in blocks of this many tokens; a
  // later request whose prompt begins with the same whole blocks (its last token left to
  // compute) takes those rows and prefills only the rest; traces record the hit
  // (reused_count, reused_from). Not with --ring-window or chunked prefill; ignored with
  // `uncached`. The prefix_reuse fault turns it on (its `block`).
  int64_t prefixCacheBlock = 0;
  // Latent attention (DeepSeek): every forward after a request's prefill attends in the
  // absorbed form serving engines decode with (kv_b_proj's per-head key rows folded into the
  // queries, scores over the latent rows; its value rows applied to the latent context), not by
  // decompressing each head's K/V. The same attention up to rounding: such a run audits clean
  // against the materialised reference. Needs a checkpoint with kv_lora_rank; ignored with
  // `uncached`.
  bool mlaAbsorbedDecode = false;
  std::function<void(double)> progress;  // fraction done, called between ticks
  std::function<bool()> cancelled;       // polled between ticks; throws AuditCancelled
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<Model> model);
  /// Runs every request to completion and returns the recorded trace. Throws UsageError
  /// for invalid requests (bad policy, empty prompt, a prompt beyond the context).
  Trace run(const std::vector<RequestSpec>& requests, const EngineOptions& options);
  Model& model() { return *model_; }
  /// After run(): where the weights did not all fit in the memory beside the run, what each
  /// forward read from the disk (MemoryNeed::check's note); empty otherwise.
  const std::string& memoryNote() const { return memoryNote_; }

 private:
  std::shared_ptr<Model> model_;
  std::string memoryNote_;
};

}  // namespace kvscope
