// Everything an audit produced, for views that need more than the report: the audited
// trace, the reference computed for each request, and accessors that rebuild the cache
// at any step as plain values (copies, never pointers into a live cache).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kvscope/AuditReport.hpp"
#include "kvscope/ExpertRouting.hpp"
#include "kvscope/FloatTensor.hpp"
#include "kvscope/RecurrentStates.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope {

/// The uncached reference for one request's real token stream (prompt + fed generated).
struct RequestReference {
  int64_t request = 0;
  std::vector<int64_t> ids;          // real tokens, no padding
  FloatTensor logits;                // [T - logitsFrom, V]: positions logitsFrom..T-1
  int64_t logitsFrom = 0;            // rows before it were never computed (a long prompt's)
  std::vector<FloatTensor> keys;     // per layer [h_kv, T, d]
  std::vector<FloatTensor> values;   // per layer [h_kv, T, d]
  // A quantised cache's reference rounds its K/V; per position, how far that rounding moves
  // the logits (max |rounded - unrounded reference|). Empty otherwise.
  std::vector<float> roundingEffect;
  // A mixture of experts whose trace records the engine's expert choices: where they
  // differed from the reference router's own (RoutingDecision: taken on a near tie, kept
  // otherwise). Empty otherwise, and in trace+trace mode.
  std::vector<RoutingDecision> routing;
  int64_t routedTokens = 0;  // stream tokens whose engine experts the reference knew
  // A model with recurrent layers whose trace records their states: per stream length n after
  // which a step recorded them, the reference's states after the first n tokens. Empty
  // otherwise, and in trace+trace mode.
  std::map<int64_t, RecurrentStates> statesAt;
  /// The logits row of stream position `position` (V values), or nullptr where the reference
  /// holds none (before logitsFrom, or past its end).
  const float* logitsAt(int64_t position) const;
};

enum class KvKind { Keys, Values };

struct AuditResult {
  AuditReport report;
  Trace trace;                              // the audited (cached) trace
  std::vector<RequestReference> references; // one per request (may be empty: trace+trace)
  // Trace+trace mode: the uncached trace. The K/V records of the requests the audit walked
  // moved into `references` (their steps' layers are empty here); logits and the rest stay.
  std::shared_ptr<const Trace> referenceTrace;

  const RequestReference* referenceFor(int64_t request) const;
  /// The cached path's cache for (request, step, layer) after that step: [h_kv, t, d],
  /// pads removed. Built from the appended records (or the step's snapshot when recorded).
  FloatTensor cachedKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const;
  /// The reference's records for the same real positions: [h_kv, t, d] (t = real tokens
  /// consumed up to that step). Empty when no reference exists for the request.
  FloatTensor referenceKv(int64_t request, int64_t step, int64_t layer, KvKind kind) const;
  /// Max |cached - reference| per layer for (request, step) over the whole cache, as the
  /// small-multiples overview shows it; NaN where shapes differ.
  std::vector<double> layerMaxDiff(int64_t request, int64_t step, KvKind kind) const;
  /// Trace+trace mode: adds a reference built from `referenceTrace` (referenceFromTrace)
  /// for every request of `trace` that has none, e.g. when stage 1 stopped the audit before
  /// any reference was compared, so views can still show the reference side. Returns how
  /// many were added; none without a reference trace.
  size_t addReferencesFromTrace();
};

/// One request's stream as a reference trace recorded it: every real fed token in order
/// (a `cache_reset` step restarts the stream), the logits row of each step at its last
/// token (NaN rows where the trace has none) and per layer the appended K/V records.
/// The request's id is kept; a request the trace lacks gives empty ids, [0, V] logits and
/// [h_kv, 0, d] records.
RequestReference referenceFromTrace(const Trace& reference, int64_t request);

}  // namespace kvscope
