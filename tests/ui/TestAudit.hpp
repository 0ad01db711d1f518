// The synthetic audit every UI test inspects: 2 requests, 3 layers, 2 kv heads, d = 8,
// 6 steps, a wrong_layer plant at layer 2 from step 3 of request 0 (layer 2 reads layer
// 1's K/V), a cross_request plant in request 1, findings, stages and step numerics that
// match. Built by the UI library's SyntheticAuditFactory; the real audit never runs.
#pragma once

#include <memory>

#include "ui/SyntheticAuditFactory.hpp"

namespace kvscope::ui::test {

inline SyntheticAuditOptions testAuditOptions() {
  SyntheticAuditOptions o;
  o.requests = 2;
  o.layers = 3;
  o.kvHeads = 2;
  o.headDim = 8;
  o.steps = 6;
  o.promptLength = 4;
  o.vocab = 48;
  o.plantRequest = 0;
  o.plantLayer = 2;
  o.plantStep = 3;
  o.crossRequest = true;
  return o;
}

inline std::shared_ptr<const AuditJobOutput> makeTestOutput() {
  return std::make_shared<const AuditJobOutput>(SyntheticAuditFactory::make(testAuditOptions()));
}

}  // namespace kvscope::ui::test
