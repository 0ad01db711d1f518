// The sampling policy: temperature, then top-k, then top-p, then softmax — the order and
// semantics of transformers' logits warpers. Temperature 0 means greedy (argmax, ties to
// the lowest index, as torch.argmax). Parameters are validated (UsageError).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvscope {

struct SamplingPolicy {
  double temperature = 0.0;             // 0 = greedy; must be finite and >= 0
  std::optional<int64_t> topK;          // 1..V (values above V behave as V)
  std::optional<double> topP;           // (0, 1]
  uint64_t seed = 0;                    // per-request generator seed
  enum class TieRule { Lowest, Highest } tieRule = TieRule::Lowest;  // greedy ties
  // Which random generator drew the sampled tokens: "kvscope" (KV Scope's RequestRng,
  // replayable from the seed), or another engine's ("torch", "numpy", "vllm", ...), which
  // the audit cannot replay. Empty: not recorded (see replayableBy()).
  std::string generator;

  bool greedy() const { return temperature == 0.0; }
  /// Throws UsageError with a clear message for temperature < 0 or NaN/inf, top-k < 1,
  /// top-p outside (0, 1].
  void validate() const;
  std::string describe() const;  // "greedy" or "T=0.7 top-k=50 top-p=0.9 seed=1"
  bool operator==(const SamplingPolicy& o) const;
  /// Whether KV Scope can replay the sampled tokens from the seed: the trace names KV
  /// Scope's generator, or names none and was recorded by KV Scope's own engine
  /// (`traceEngine` starts with "kvscope"). docs/sampling-policy.md.
  bool replayableBy(const std::string& traceEngine) const;
  static constexpr const char* kKvScopeGenerator = "kvscope";
};

/// The sampling options as a front end (kvscope-cli generate/audit/policy, the GUI) reads
/// them, each given or not: the one meaning of "off" everywhere. An option not given is
/// unset (temperature: `defaultTemperature`); a given top-k must be >= 1 and a given top-p in
/// (0, 1] — 0 is never read as "off" (SamplingPolicy::validate's UsageError otherwise).
struct SamplingOptions {
  std::optional<double> temperature;
  std::optional<int64_t> topK;
  std::optional<double> topP;
  std::optional<uint64_t> seed;
  std::optional<std::string> tieRule;  // "lowest" | "highest"
  double defaultTemperature = 0.0;
  SamplingPolicy policy() const;
};

void to_json(nlohmann::json& j, const SamplingPolicy& p);
void from_json(const nlohmann::json& j, SamplingPolicy& p);

}  // namespace kvscope
