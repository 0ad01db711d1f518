// `expert_routing` (KV Scope's): on a mixture-of-experts checkpoint whose trace records the
// engine's expert choices, a token went to other experts than the checkpoint's router picks
// by more than the near-tie margin (kvscope/ExpertRouting.hpp): a misread
// num_experts_per_tok, a router fed the wrong hidden state or missing its bias, a gating
// kernel that ranks the wrong values. The records of every layer up to the router's are
// exact; the token's hidden state, and so the next layers' records, differ from there on.
// Near ties inside the margin are no finding: the reference takes the engine's experts there
// (a bf16 run flips them without any bug).
#include <algorithm>
#include <cmath>
#include <limits>

#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

std::string idList(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// The request's routing decisions the reference kept its own choice in (beyond the margin).
std::vector<const RoutingDecision*> refused(const RequestReference& ref) {
  std::vector<const RoutingDecision*> out;
  for (const auto& d : ref.routing)
    if (!d.followed) out.push_back(&d);
  std::sort(out.begin(), out.end(), [](const RoutingDecision* a, const RoutingDecision* b) {
    return a->token != b->token ? a->token < b->token : a->layer < b->layer;
  });
  return out;
}

class ExpertRoutingRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::ExpertRouting,
        "on a mixture of experts, the K/V records exact up to a layer and wrong after it from one "
        "token on; the trace's expert choices for that token and layer differ from the "
        "checkpoint router's top-k by more than the near-tie margin",
        "how the engine ranks the router logits: num_experts_per_tok as read, the router's "
        "input (the post-attention norm) and bias, the top-k and its gating (softmax then "
        "top-k, or top-k then softmax)",
        MatrixOrigin::KvScope,
        117,
        AuditStage::Numerics,
        {},
        {"a mixture of experts routed to another expert count than its config names "
         "(JieShibo/MoLE#7: a top-k of 10 experts where the model routes to 2; docs/audit.md)"},
        {{"expert_routing",
          "from step `step` on, the cached path routes `layer`'s tokens to `experts` experts "
          "instead of the checkpoint's num_experts_per_tok (-1 = every layer; experts 0 = one "
          "more); needs a mixture-of-experts checkpoint",
          "the next layer's records wrong from the first routed token on, the layer's own exact",
          [] {
            auto p = fromStepAtLayerParameters();
            p.push_back({"experts", "experts per token the path takes (0 = num_experts_per_tok + 1)", "0"});
            return p;
          }()}},
        "a token took other experts than the checkpoint's router picks",
        true};
    return s;
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& ev) const override {
    return explain(ctx, r, a, own, ev, false);
  }

  bool explainLogits(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                     const Evidence& ev) const override {
    auto it = ctx.references.find(r);
    return it != ctx.references.end() && it->second && explain(ctx, r, a, *it->second, ev, true);
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Numerics || !in.config || in.config->moe.numExperts == 0) return;
    int64_t tokens = 0, followed = 0, beyond = 0;
    double widest = 0.0, widestMargin = 0.0;
    for (const auto& [r, ref] : in.references) {
      if (!ref) continue;
      tokens += ref->routedTokens;
      for (const auto& d : ref->routing) {
        if (!d.followed) {
          ++beyond;
          continue;
        }
        ++followed;
        if (d.gap >= widest) {
          widest = d.gap;
          widestMargin = d.margin;
        }
      }
    }
    if (tokens == 0) {
      checks.push_back("not checked: expert routing: the trace records no expert choices, so a "
                       "near-tie flip of a reduced-precision run cannot be told from a routing "
                       "bug (kvscope-record and the built-in engine record them)");
      return;
    }
    // A choice beyond the margin fails the stage when it is the finding's; one that moved no
    // record (the trace's experts are not the ones the engine computed with) is said as such.
    std::string line = (in.fired ? "FAIL" : beyond > 0 ? "note" : "ok") + std::string(": expert routing of ") +
                       std::to_string(tokens) + " tokens";
    line += followed > 0 ? "; the reference took the engine's experts at " + std::to_string(followed) +
                               " near ties (widest gap " + numberText(widest, 3) + " within margin " +
                               numberText(widestMargin, 3) + ")"
                         : beyond > 0 ? "" : "; every recorded choice is the reference router's own";
    if (beyond > 0)
      line += "; " + std::to_string(beyond) + " choices differ beyond the near-tie margin" +
              (in.fired ? "" : " without moving any record (are the recorded experts the ones the engine used?)");
    checks.push_back(line);
  }

  std::optional<TimelineMarker> marker(const Finding& f) const override {
    return TimelineMarker{f.step, "expert_routing", "layer " + std::to_string(f.layer) + " experts", true};
  }

 private:
  static bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const RequestReference& ref,
                      Evidence ev, bool logitsOnly) {
    const ModelConfig* config = ctx.refs.modelConfig();
    if (!config || config->moe.numExperts == 0) return false;
    const int64_t last = a.lastRealStreamIndex();
    const auto beyond = refused(ref);
    const RoutingDecision* d = nullptr;
    for (const RoutingDecision* x : beyond)
      if (x->token <= last && (logitsOnly || x->layer < a.firstBadLayer)) {
        d = x;
        break;
      }
    if (!d) return false;
    int64_t followed = 0;
    for (const auto& x : ref.routing) followed += x.followed ? 1 : 0;
    ev["router_layer"] = static_cast<double>(d->layer);
    ev["token_position"] = static_cast<double>(d->token);
    for (size_t k = 0; k < d->engine.size(); ++k) ev["engine_expert_" + std::to_string(k)] = static_cast<double>(d->engine[k]);
    for (size_t k = 0; k < d->reference.size(); ++k)
      ev["reference_expert_" + std::to_string(k)] = static_cast<double>(d->reference[k]);
    ev["engine_experts_per_token"] = static_cast<double>(d->engine.size());
    ev["checkpoint_experts_per_token"] = static_cast<double>(config->moe.topK);
    if (std::isfinite(d->gap)) ev["router_gap"] = d->gap;
    ev["near_tie_margin"] = d->margin;
    ev["choices_beyond_margin"] = static_cast<double>(beyond.size());
    ev["near_ties_followed"] = static_cast<double>(followed);
    std::string why = "the engine routed the token at position " + std::to_string(d->token) + " of layer " +
                      std::to_string(d->layer) + " to experts " + idList(d->engine) +
                      " where the checkpoint's router picks " + idList(d->reference);
    if (d->engine.size() != d->reference.size())
      why += ": " + std::to_string(d->engine.size()) + " experts per token, but num_experts_per_tok is " +
             std::to_string(config->moe.topK);
    else if (std::isfinite(d->gap))
      why += ": the router scores its pick " + numberText(d->gap, 3) + " above the engine's (logits), beyond the "
             "near-tie margin " + numberText(d->margin, 3) + " of a " + ctx.tol.dtype() + " run";
    else
      why += ": an expert this router does not have";
    why += logitsOnly ? "; every K/V record matches, the logits do not"
                      : "; the records of layers 0.." + std::to_string(d->layer) + " match, layer " +
                            std::to_string(a.firstBadLayer) + "'s differ";
    if (followed > 0) why += " (" + std::to_string(followed) + " near ties inside the margin were followed)";
    ctx.add(FindingDraft(finding::ExpertRouting)
                .at(*a.step)
                .layer(d->layer)
                .position(d->token)
                .confidence(0.9)
                .explanation(why)
                .evidence(std::move(ev)),
            a);
    return true;
  }
};

}  // namespace

const FailureRow& expertRouting() {
  static const ExpertRoutingRow row;
  return row;
}

}  // namespace kvscope::detail::rows
