#include "SamplingArgs.hpp"

namespace kvscope::cli {

void SamplingArgs::addTo(CLI::App& cmd, double defaultTemperature, bool withTieRule) {
  defaultTemperature_ = defaultTemperature;
  temperatureOpt_ = cmd.add_option("--temperature", temperature_,
                                   "Sampling temperature >= 0; 0 = greedy (default " +
                                       std::string(defaultTemperature == 0.0 ? "0" : "1") + ")");
  topKOpt_ = cmd.add_option("--top-k", topK_,
                            "Keep the k highest logits (ties kept), k >= 1; leave out for none");
  topPOpt_ = cmd.add_option("--top-p", topP_, "Nucleus mass in (0, 1]; leave out for none");
  seedOpt_ =
      cmd.add_option("--seed", seed_,
                     "Per-request generator seed (default 0; each request has its own generator)");
  if (withTieRule)
    tieRuleOpt_ =
        cmd.add_option("--tie-rule", tieRule_, "Greedy ties: lowest (torch.argmax) or highest")
            ->check(CLI::IsMember({"lowest", "highest"}));
}

SamplingPolicy SamplingArgs::policy() const {
  SamplingOptions o;
  o.defaultTemperature = defaultTemperature_;
  if (temperatureOpt_->count() > 0) o.temperature = temperature_;
  if (topKOpt_->count() > 0) o.topK = topK_;
  if (topPOpt_->count() > 0) o.topP = topP_;
  if (seedOpt_->count() > 0) o.seed = seed_;
  if (tieRuleOpt_ && tieRuleOpt_->count() > 0) o.tieRule = tieRule_;
  return o.policy();
}

}  // namespace kvscope::cli
