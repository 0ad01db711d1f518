// Applies a SamplingPolicy to one logits row. Pure C++ on float buffers, no torch.
#pragma once

#include <cstdint>
#include <vector>

#include "kvscope/RequestRng.hpp"
#include "kvscope/SamplingPolicy.hpp"

namespace kvscope {

struct SamplingOutcome {
  int64_t token = -1;
  std::vector<float> probabilities;  // [V] after temperature -> top-k -> top-p -> softmax;
                                     // greedy: one-hot on the chosen token
  std::vector<int64_t> eligible;     // ids with probability > 0, ascending
  std::vector<int64_t> tiedAtTop;    // ids whose logit equals the maximum (>=1 entries)
  uint64_t drawsBefore = 0;          // rng.draws() before choosing
  uint64_t drawsAfter = 0;           // rng.draws() after choosing
  double uniform = -1.0;             // the draw used (sampled runs), else -1
};

class Sampler {
 public:
  /// Probabilities after the warpers (temperature > 0 required); masked tokens get 0.
  /// Matches transformers' TemperatureLogitsWarper, TopKLogitsWarper (keeps every token
  /// tied with the k-th value), TopPLogitsWarper (keeps the smallest top set whose mass
  /// reaches p, at least one token) and softmax. Computed in double, returned as float.
  static std::vector<float> warpedProbabilities(const std::vector<float>& logits,
                                                const SamplingPolicy& policy);
  /// Greedy choice under a tie rule (Lowest = torch.argmax).
  static int64_t argmax(const std::vector<float>& logits, SamplingPolicy::TieRule rule);
  /// Chooses a token: greedy when policy.greedy(), else inverse-CDF over the warped
  /// probabilities in ascending id order with one rng draw. Validates the policy.
  static SamplingOutcome choose(const std::vector<float>& logits, const SamplingPolicy& policy,
                                RequestRng& rng);

  /// The same warped distribution in double precision (what choose() samples from): removed
  /// tokens are exactly 0. Throws UsageError for a greedy or invalid policy, an empty row,
  /// a NaN or +inf logit, or a row with no finite logit.
  static std::vector<double> warpedProbabilitiesDouble(const std::vector<float>& logits,
                                                       const SamplingPolicy& policy);
  /// Inverse CDF in ascending id order: the first id i with p[i] > 0 and
  /// u * S < p[0] + ... + p[i], where S is the sum of all p (1 up to rounding); the last id
  /// with p > 0 when rounding leaves u * S at or above the final sum. -1 when every p is 0.
  static int64_t inverseCdf(const std::vector<double>& probabilities, double u);
  /// Ids whose logit equals the maximum, ascending (empty for an empty row). NaN logits are
  /// refused (UsageError).
  static std::vector<int64_t> tiedAtTop(const std::vector<float>& logits);
};

}  // namespace kvscope
