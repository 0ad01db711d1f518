// The sampling options of kvscope-cli generate, audit and policy, registered and read in
// one place; what they mean is SamplingOptions (core): a given option is taken as given.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvscope/SamplingPolicy.hpp"

namespace kvscope::cli {

class SamplingArgs {
 public:
  /// Adds --temperature, --top-k, --top-p, --seed (and --tie-rule when `withTieRule`).
  void addTo(CLI::App& cmd, double defaultTemperature, bool withTieRule = false);
  /// The policy the options describe; UsageError (exit 2) for a value outside the domain.
  SamplingPolicy policy() const;

 private:
  double defaultTemperature_ = 0.0;
  double temperature_ = 0.0;
  int64_t topK_ = 0;
  double topP_ = 0.0;
  uint64_t seed_ = 0;
  std::string tieRule_;
  CLI::Option* temperatureOpt_ = nullptr;
  CLI::Option* topKOpt_ = nullptr;
  CLI::Option* topPOpt_ = nullptr;
  CLI::Option* seedOpt_ = nullptr;
  CLI::Option* tieRuleOpt_ = nullptr;
};

}  // namespace kvscope::cli
