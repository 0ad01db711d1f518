// A mixture-of-experts router's choices seen from two sides: what an engine chose
// (ExpertChoices: a trace's `experts`, the ExpertGuide an uncached pass may follow) and what
// the pass decided where its own router chose otherwise (RoutingDecision). Plain values; the
// rule is in model/ExpertRouter.
//
// Why: a router's top-k is discontinuous. When two experts' router logits lie closer than the
// engine's rounding noise (bf16 compute), the engine may take the other expert, and from
// then on that token's hidden state, and every later layer's K/V, differ from a float32
// reference by far more than any tolerance — without any bug. The reference therefore takes
// the engine's choice where its own router cannot tell the two apart (a near tie) and keeps
// its own where the gap is beyond the noise: that difference is a routing bug (the
// expert_routing row).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace kvscope {

/// The experts a router chose, per token and model layer (the trace's `experts`,
/// docs/trace-format.md "Expert choices").
struct ExpertChoices {
  int64_t slots = 0;         // K, experts per token; 0: none recorded
  int64_t layers = 0;        // model layers (a dense layer's entries hold -1)
  std::vector<int64_t> ids;  // [tokens, layers, slots], the router's order; -1: no expert
  bool empty() const { return slots == 0; }
  /// The experts (>= 0) of token `token` at `layer`, in the router's order; empty when none
  /// were recorded there.
  std::vector<int64_t> of(size_t token, int64_t layer) const;
  bool operator==(const ExpertChoices& o) const {
    return slots == o.slots && layers == o.layers && ids == o.ids;
  }
};

struct ExpertGuide {
  ExpertChoices choices;  // the engine's, per token of the pass; -1: none known
  /// How far apart (in router logits) two choices may be and still be a near tie, at `layer`
  /// and token index `token`, for a router row whose largest |logit| is `maxAbs`.
  std::function<double(int64_t layer, int64_t token, double maxAbs)> margin;
};

/// Where the engine's experts and the pass's own top-k differed.
struct RoutingDecision {
  int64_t layer = 0;
  int64_t token = 0;                // index in the pass (the stream position)
  std::vector<int64_t> engine;      // the engine's experts, its order
  std::vector<int64_t> reference;   // the pass's own top-k
  /// How much higher (router logits) the pass's weakest own choice scores than the engine's
  /// weakest other one; infinite when the engine chose another number of experts or an
  /// expert the router does not have.
  double gap = 0.0;
  double margin = 0.0;              // the near-tie margin at this layer and token
  bool followed = false;            // gap <= margin: the pass took the engine's experts
};

/// What a K/V record of `layer` at stream position `position` (layer -1: the logits row)
/// multiplies its tolerance by, given a pass's routing decisions: kNearTieSlack where the pass
/// took the engine's experts for that token on a near tie at an earlier layer, 1 elsewhere.
/// Such a token is one whose router rounding was large enough to flip the choice, and it
/// carries that noise on: transformers' own float32 GPT-OSS run forced to its bf16 run's
/// experts sits 5x further from the bf16 records at the flipped token than at its
/// neighbours (0.08 vs 0.016 relative, layer 1), and the audit's bf16 budget at 1.05x there
/// (tests/core/FamilyGoldenTest).
double nearTieSlack(const std::vector<RoutingDecision>& routing, int64_t layer, int64_t position);
inline constexpr double kNearTieSlack = 2.0;

}  // namespace kvscope
