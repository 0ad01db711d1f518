// A synthetic but realistic audit output, for tests, the benchmark and `kvscope --synthetic`
// (screenshots without a model). It plants the worked case of the audit method: layer
// `plantLayer` of request `plantRequest` reads layer plantLayer-1's K/V from `plantStep`
// on (wrong_layer), and optionally a second request's cache is overwritten with the first
// request's records (cross_request). Findings, stages and per-step numerics match the
// planted data; nothing here runs the real audit.
#pragma once

#include <cstdint>

#include "kvscope/AuditJob.hpp"

namespace kvscope::ui {

struct SyntheticAuditOptions {
  int64_t requests = 2;
  int64_t layers = 3;
  int64_t kvHeads = 2;
  int64_t headDim = 8;
  int64_t promptLength = 4;
  int64_t steps = 6;            // per request: step 0 = prefill, then steps-1 decode steps
  int64_t vocab = 48;
  int64_t plantRequest = 0;
  int64_t plantLayer = 2;       // >= 1
  int64_t plantStep = 3;
  bool crossRequest = false;    // request 1's records replaced by request 0's from step 2
  bool divergent = true;        // false: a clean run (fp32 noise only)
};

class SyntheticAuditFactory {
 public:
  static AuditJobOutput make(const SyntheticAuditOptions& options = {});
  /// The token text the synthetic vocabulary gives to `id`.
  static std::string piece(int64_t id);
};

}  // namespace kvscope::ui
