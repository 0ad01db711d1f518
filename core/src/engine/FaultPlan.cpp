#include "engine/FaultPlan.hpp"

#include "kvscope/Error.hpp"

namespace kvscope::detail {

FaultPlan::FaultPlan(std::vector<FaultSpec> faults, int64_t numLayers)
    : faults_(std::move(faults)), fired_(faults_.size()) {
  auto checkLayer = [&](const FaultSpec& f, const char* key, bool allowAll) {
    const int64_t l = f.get(key);
    if ((allowAll && l == -1) || (l >= 0 && l < numLayers)) return;
    throw UsageError("fault '" + f.toString() + "': " + key + "=" + std::to_string(l) +
                     " is not a layer of this model (0.." + std::to_string(numLayers - 1) + ")");
  };
  for (const auto& f : faults_) {
    if (f.name == "wrong_layer") {
      checkLayer(f, "layer", false);
      checkLayer(f, "source", false);
      if (f.get("source") >= f.get("layer"))
        throw UsageError("fault '" + f.toString() +
                         "': source must be an earlier layer than layer (its records must exist "
                         "when layer runs)");
    } else if (f.name == "duplicate_append" || f.name == "batch_row_mix" ||
               f.name == "window_off_by_one" || f.name == "window_wrap" || f.name == "chunk_mask" ||
               f.name == "temperature_position" || f.name == "recurrent_state") {
      checkLayer(f, "layer", true);
    } else if (f.name == "speculative_rollback" || f.name == "state_rollback") {
      checkLayer(f, "layer", true);
      if (f.get("draft") < 1 || f.get("draft") > 16)
        throw UsageError("fault '" + f.toString() + "': draft must be in 1..16");
    } else if (f.name == "kv_quantization") {
      checkLayer(f, "layer", true);
      if (f.get("scale") <= 0 || f.get("scale") == 100 || f.get("scale") > 100000)
        throw UsageError("fault '" + f.toString() +
                         "': scale must be a percentage in 1..100000 other than 100 (100 is the "
                         "right scale: no fault)");
    } else if (f.name == "batch_variance") {
      checkLayer(f, "layer", true);
      if (f.get("step") < 0)
        throw UsageError("fault '" + f.toString() + "': step must be >= 0 (0 = the prefill)");
    } else if (f.name == "rope_scaling" || f.name == "qk_norm_order" || f.name == "nope_layer_rope" ||
               f.name == "softcap_dropped" || f.name == "layer_rope_theta" ||
               f.name == "partial_rotary" || f.name == "sink_dropped" ||
               f.name == "yarn_attention_factor" || f.name == "expert_routing" || f.name == "mla_absorb" ||
               f.name == "score_mscale") {
      checkLayer(f, "layer", true);
      if (f.get("step") < 0)
        throw UsageError("fault '" + f.toString() + "': step must be >= 0 (0 = the prefill)");
    } else if (f.name == "chunk_position") {
      checkLayer(f, "layer", true);
      if (f.get("chunk") < 1)
        throw UsageError("fault '" + f.toString() +
                         "': chunk must be >= 1 (chunk 0 starts at position 0 either way)");
      if (f.get("size") < 1) throw UsageError("fault '" + f.toString() + "': size must be >= 1");
    } else if (f.name == "prefix_state") {
      checkLayer(f, "layer", true);
      if (f.get("block") < 1 || f.get("block") > 4096)
        throw UsageError("fault '" + f.toString() + "': block must be in 1..4096 tokens");
    } else if (f.name == "prefix_reuse") {
      checkLayer(f, "layer", true);
      if (f.get("block") < 2 || f.get("block") > 64)
        throw UsageError("fault '" + f.toString() +
                         "': block must be in 2..64 (a block's last token is the one it skips)");
    } else if (f.name == "stale_cache") {
      checkLayer(f, "layer", false);
    } else if (f.name == "cross_request" && f.get("request") == f.get("victim")) {
      throw UsageError("fault '" + f.toString() + "': request and victim must differ");
    }
  }
}

bool FaultPlan::matches(const FaultSpec& f, int64_t request) {
  auto it = f.params.find("request");
  return it == f.params.end() || it->second < 0 || it->second == request;
}

const FaultSpec* FaultPlan::find(const char* name) const {
  for (const auto& f : faults_)
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<const FaultSpec*> FaultPlan::all(const char* name) const {
  std::vector<const FaultSpec*> out;
  for (const auto& f : faults_)
    if (f.name == name) out.push_back(&f);
  return out;
}

int64_t FaultPlan::position(int64_t request, int64_t step, int64_t indexInStep, int64_t expected) const {
  for (const auto* f : all("wrong_position")) {
    if (!matches(*f, request) || step < f->get("step")) continue;
    // Positions restart at 0 at the first affected step and count up from there.
    const int64_t p = f->get("restart") ? (step - f->get("step")) + indexInStep
                                        : expected + f->get("offset");
    if (p != expected) note(f, request, step, -1);
    return p;
  }
  return expected;
}

std::vector<FaultPlan::NamedLayer> FaultPlan::namedLayers() const {
  std::vector<NamedLayer> out;
  for (const auto& f : faults_)
    for (const char* key : {"layer", "source"})
      if (const auto it = f.params.find(key); it != f.params.end() && it->second >= 0)
        out.push_back({f.name, key, it->second});
  return out;
}

int64_t FaultPlan::wrongLayerSource(int64_t request, int64_t step, int64_t layer) const {
  for (const auto* f : all("wrong_layer"))
    if (matches(*f, request) && step >= f->get("step") && layer == f->get("layer")) {
      note(f, request, step, layer);
      return f->get("source");
    }
  return -1;
}

bool FaultPlan::duplicateAppend(int64_t request, int64_t step, int64_t layer) const {
  for (const auto* f : all("duplicate_append"))
    if (matches(*f, request) && step == f->get("step") && (f->get("layer") < 0 || f->get("layer") == layer)) {
      note(f, request, step, layer);
      return true;
    }
  return false;
}

bool FaultPlan::duplicatePromptToken(int64_t request) const {
  for (const auto* f : all("duplicate_prompt_token"))
    if (matches(*f, request)) return true;
  return false;
}

int64_t FaultPlan::crossRequestVictim(int64_t request) const {
  for (const auto* f : all("cross_request"))
    if (f->get("request") == request) return f->get("victim");
  return -1;
}

int64_t FaultPlan::batchRowSource(int64_t request, int64_t step, int64_t layer) const {
  for (const auto* f : all("batch_row_mix"))
    if (f->get("to") == request && step >= f->get("step") && (f->get("layer") < 0 || f->get("layer") == layer))
      return f->get("from");
  return -1;
}

bool FaultPlan::tieRuleLast(int64_t request) const {
  for (const auto* f : all("tie_rule_last"))
    if (matches(*f, request)) return true;
  return false;
}

bool FaultPlan::rngExtraDraw(int64_t request, int64_t step) const {
  for (const auto* f : all("rng_extra_draw"))
    if (matches(*f, request) && step == f->get("step")) return true;
  return false;
}

bool FaultPlan::rngReseed(int64_t request, int64_t step) const {
  for (const auto* f : all("rng_reseed"))
    if (matches(*f, request) && step >= f->get("step")) return true;
  return false;
}

int64_t FaultPlan::windowExtra(int64_t layer) const {
  for (const auto* f : all("window_off_by_one"))
    if (f->get("layer") < 0 || f->get("layer") == layer) return 1;
  return 0;
}

bool FaultPlan::chunkAsWindow(int64_t layer) const {
  for (const auto* f : all("chunk_mask"))
    if (f->get("layer") < 0 || f->get("layer") == layer) return true;
  return false;
}

bool FaultPlan::padsEnterState(int64_t request, int64_t layer) const {
  return atLayer("recurrent_state", request, layer);
}

bool FaultPlan::temperatureAtCacheIndex(int64_t request, int64_t layer) const {
  return atLayer("temperature_position", request, layer);
}

int64_t FaultPlan::ringWrapShift(int64_t request, int64_t layer) const {
  return atLayer("window_wrap", request, layer) ? -1 : 0;
}

bool FaultPlan::needsRingCache() const { return find("window_wrap") != nullptr; }

bool FaultPlan::prefixPartialMatch(int64_t request) const {
  for (const auto* f : all("prefix_reuse"))
    if (matches(*f, request)) return true;
  return false;
}

int64_t FaultPlan::prefixReuseLayer(int64_t request) const {
  for (const auto* f : all("prefix_reuse"))
    if (matches(*f, request)) return f->get("layer");
  return -1;
}

int64_t FaultPlan::prefixBlock() const {
  for (const char* name : {"prefix_reuse", "prefix_state"})
    if (const auto* f = find(name)) return f->get("block");
  return 0;
}

bool FaultPlan::dropsPrefixState(int64_t request, int64_t layer) const {
  return atLayer("prefix_state", request, layer);
}

std::vector<int64_t> FaultPlan::layersNamedBy(const char* name) const {
  std::vector<int64_t> out;
  for (const auto* f : all(name)) out.push_back(f->get("layer"));
  return out;
}

bool FaultPlan::skipRollback(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("speculative_rollback", request, step, layer);
}

bool FaultPlan::skipStateRollback(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("state_rollback", request, step, layer);
}

int64_t FaultPlan::speculativeDrafts() const {
  for (const char* name : {"speculative_rollback", "state_rollback"})
    if (const auto* f = find(name)) return f->get("draft");
  return 0;
}

double FaultPlan::quantizationScaleFactor(int64_t request, int64_t step, int64_t layer) const {
  for (const auto* f : all("kv_quantization"))
    if (matches(*f, request) && step >= f->get("step") &&
        (f->get("layer") < 0 || f->get("layer") == layer)) {
      note(f, request, step, layer);
      return static_cast<double>(f->get("scale")) / 100.0;
    }
  return 1.0;
}

bool FaultPlan::needsQuantizedCache() const { return find("kv_quantization") != nullptr; }

bool FaultPlan::ropeScalingDropped(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("rope_scaling", request, step, layer);
}

bool FaultPlan::dropsRopeScaling() const { return find("rope_scaling") != nullptr; }

bool FaultPlan::atLayer(const char* name, int64_t request, int64_t layer) const {
  for (const auto* f : all(name))
    if (matches(*f, request) && (f->get("layer") < 0 || f->get("layer") == layer)) return true;
  return false;
}

bool FaultPlan::fromStepAtLayer(const char* name, int64_t request, int64_t step,
                                int64_t layer) const {
  for (const auto* f : all(name))
    if (matches(*f, request) && step >= f->get("step") &&
        (f->get("layer") < 0 || f->get("layer") == layer)) {
      note(f, request, step, layer);
      return true;
    }
  return false;
}

bool FaultPlan::qkNormAfterRope(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("qk_norm_order", request, step, layer);
}

bool FaultPlan::swapsQkNormOrder() const { return find("qk_norm_order") != nullptr; }

bool FaultPlan::ropeFlipped(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("nope_layer_rope", request, step, layer);
}

bool FaultPlan::flipsNopeLayers() const { return find("nope_layer_rope") != nullptr; }

bool FaultPlan::layerRopeSwapped(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("layer_rope_theta", request, step, layer);
}

bool FaultPlan::swapsLayerRopes() const { return find("layer_rope_theta") != nullptr; }

bool FaultPlan::wholeHeadRotated(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("partial_rotary", request, step, layer);
}

bool FaultPlan::rotatesWholeHeads() const { return find("partial_rotary") != nullptr; }

const char* FaultPlan::dropFaultName(AttentionFeature feature) {
  switch (feature) {
    case AttentionFeature::Softcap: return "softcap_dropped";
    case AttentionFeature::Sinks: return "sink_dropped";
    case AttentionFeature::LatentHeadSplit: return "mla_absorb";
    case AttentionFeature::ScoreMscale: return "score_mscale";
  }
  return "";
}

bool FaultPlan::featureDropped(AttentionFeature feature, int64_t request, int64_t step,
                               int64_t layer) const {
  return fromStepAtLayer(dropFaultName(feature), request, step, layer);
}

bool FaultPlan::dropsFeature(AttentionFeature feature) const {
  return find(dropFaultName(feature)) != nullptr;
}

bool FaultPlan::attentionFactorDropped(int64_t request, int64_t step, int64_t layer) const {
  return fromStepAtLayer("yarn_attention_factor", request, step, layer);
}

bool FaultPlan::dropsAttentionFactor() const { return find("yarn_attention_factor") != nullptr; }

int64_t FaultPlan::expertsPerToken(int64_t request, int64_t step, int64_t layer, int64_t topK) const {
  for (const auto* f : all("expert_routing"))
    if (matches(*f, request) && step >= f->get("step") &&
        (f->get("layer") < 0 || f->get("layer") == layer)) {
      note(f, request, step, layer);
      return f->get("experts") > 0 ? f->get("experts") : topK + 1;
    }
  return topK;
}

std::vector<int64_t> FaultPlan::expertCounts() const {
  std::vector<int64_t> out;
  for (const auto* f : all("expert_routing")) out.push_back(f->get("experts"));
  return out;
}

bool FaultPlan::chunkPositionsRestart(int64_t request, int64_t chunk, int64_t layer) const {
  for (const auto* f : all("chunk_position"))
    if (matches(*f, request) && chunk >= f->get("chunk") && f->get("layer") == layer) {
      note(f, request, -1, layer);
      return true;
    }
  return false;
}

int64_t FaultPlan::prefillChunk() const {
  if (const auto* f = find("chunk_position")) return f->get("size");
  return 0;
}

int64_t FaultPlan::projectionSplits(int64_t request, int64_t step, int64_t layer,
                                    int64_t batchMates) const {
  if (batchMates < 2) return 1;
  for (const auto* f : all("batch_variance"))
    if (matches(*f, request) && step >= f->get("step") &&
        (f->get("layer") < 0 || f->get("layer") == layer)) {
      note(f, request, step, layer);
      return batchMates;
    }
  return 1;
}

bool FaultPlan::makesBatchVariant() const { return find("batch_variance") != nullptr; }

std::optional<FaultPlan::StaleUpdate> FaultPlan::staleCache() const {
  if (const auto* f = find("stale_cache"))
    return StaleUpdate{f->get("tick"), f->get("layer"), static_cast<float>(f->get("scale")) / 100.0f};
  return std::nullopt;
}

std::vector<std::string> FaultPlan::describe() const {
  std::vector<std::string> out;
  for (const auto& f : faults_) out.push_back(f.toString());
  return out;
}

void FaultPlan::note(const FaultSpec* f, int64_t request, int64_t step, int64_t layer) const {
  FaultFiring& out = fired_.at(static_cast<size_t>(f - faults_.data()));
  if (out.fired) return;
  out.fired = true;
  out.request = request;
  out.step = step;
  out.layer = layer;
}

void FaultPlan::noteFired(const char* name, int64_t request, int64_t step, int64_t layer) const {
  for (const auto* f : all(name))
    if (request < 0 || matches(*f, request)) return note(f, request, step, layer);
}

std::vector<FaultFiring> FaultPlan::firings(const RunFacts& facts) const {
  std::vector<FaultFiring> out = fired_;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].fired) continue;
    const FaultSpec& f = faults_[i];
    const auto has = [&](const char* k) { return f.params.count(k) > 0; };
    std::string& why = out[i].reason;
    if (has("request") && f.get("request") >= facts.requests)
      why = "the run has no request " + std::to_string(f.get("request")) + " (it has " +
            std::to_string(facts.requests) + ")";
    else if (has("step") && f.get("step") > facts.lastStep)
      why = "no step reached step=" + std::to_string(f.get("step")) + " (the last was step " +
            std::to_string(facts.lastStep) + ")";
    else if (f.name == "prefix_reuse")
      why = !facts.prefixCache ? "the run has no prefix cache"
            : !facts.prefilledAlone
                ? "no request was prefilled alone (the prefix cache serves only those)"
            : facts.prefixHit
                ? "every block handed over matched in full: no prompt differed from an earlier "
                  "one only at a block's last token"
                : "no two prompts share a full block of " + std::to_string(f.get("block")) +
                      " tokens (its last token aside)";
    else if (f.name == "stale_cache")
      why = f.get("tick") > facts.lastTick
                ? "no tick reached tick=" + std::to_string(f.get("tick")) + " (the run ended at tick " +
                      std::to_string(facts.lastTick) + ")"
                : "no request held a cache when the weights changed at tick " +
                      std::to_string(f.get("tick"));
    else if ((f.name == "rng_extra_draw" || f.name == "rng_reseed") && !facts.sampled)
      why = "every request is greedy: no random draw to change";
    else if (f.name == "tie_rule_last")
      why = "no choice had a tie that the two rules break differently";
    else if (f.name == "cross_request")
      why = "the run has no request " + std::to_string(f.get("victim")) + " to take the row of";
    else if (f.name == "batch_row_mix")
      why = "requests " + std::to_string(f.get("from")) + " and " + std::to_string(f.get("to")) +
            " never ran in one batched forward (--batch)";
    else if ((f.name == "window_off_by_one" || f.name == "window_wrap") && !facts.slidingWindow)
      why = "no layer has a sliding window";
    else if (f.name == "window_off_by_one")
      why = "no cache grew past its sliding window";
    else if (f.name == "window_wrap")
      why = "no ring wrapped before a later forward (no request held more entries than its window)";
    else if (f.name == "recurrent_state")
      why = "no request ran left-padded (--batch with prompts of different lengths), so no pad reached a "
            "recurrent layer";
    else if (f.name == "temperature_position")
      why = "no request with a query temperature ran left-padded (--batch with prompts of different lengths)";
    else if (f.name == "chunk_mask")
      why = "no query got past its request's first " + std::to_string(facts.attentionChunk) +
            " positions (the first chunk, where a sliding window of the chunk's size sees the same keys)";
    else if (f.name == "chunk_position")
      why = "no prompt reached chunk " + std::to_string(f.get("chunk")) + " (chunks of " +
            std::to_string(f.get("size")) + " tokens)";
    else if (f.name == "speculative_rollback" || f.name == "state_rollback")
      why = "no draft was rejected from step " + std::to_string(f.get("step")) + " on";
    else if (f.name == "prefix_state")
      why = !facts.prefilledAlone
                ? "no request was prefilled alone (the prefix cache serves only those)"
                : "no prefix hit: no two prompts share a full block of " + std::to_string(f.get("block")) +
                      " tokens (their last token aside)";
    else if (f.name == "duplicate_prompt_token")
      why = "no request decoded a token after its prefill";
    else
      why = "the conditions it needs never arose in this run";
  }
  return out;
}

}  // namespace kvscope::detail
