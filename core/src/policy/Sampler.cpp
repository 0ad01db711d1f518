#include "kvscope/Sampler.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "kvscope/Error.hpp"

namespace kvscope {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// NaN and +inf cannot be ranked or exponentiated meaningfully; -inf is a masked token.
void checkLogits(const std::vector<float>& logits) {
  if (logits.empty()) throw UsageError("the logits row is empty");
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]))
      throw UsageError("logit " + std::to_string(i) + " is NaN; cannot apply a sampling policy");
    if (std::isinf(logits[i]) && logits[i] > 0)
      throw UsageError("logit " + std::to_string(i) +
                       " is +inf; cannot apply a sampling policy");
  }
}

// softmax over `x` (entries may be -inf); at least one entry must be finite.
std::vector<double> softmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  std::vector<double> e(x.size(), 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == kNegInf) continue;
    e[i] = std::exp(x[i] - m);
    sum += e[i];
  }
  for (double& v : e) v /= sum;
  return e;
}

// TopKLogitsWarper: k = min(k, V); remove every score strictly below the k-th largest, so
// scores tied with the k-th value all survive.
void applyTopK(std::vector<double>& x, int64_t topK) {
  const size_t k = static_cast<size_t>(std::min<int64_t>(topK, static_cast<int64_t>(x.size())));
  std::vector<double> sorted = x;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   sorted.end(), std::greater<double>());
  const double kth = sorted[k - 1];
  for (double& v : x)
    if (v < kth) v = kNegInf;
}

// TopPLogitsWarper: stable ascending sort, cumulative softmax, remove positions whose
// cumulative probability is <= 1 - p, never the last (largest) position. Among tied scores
// the stable sort puts lower ids first, so a cut through a tie removes the lower ids.
void applyTopP(std::vector<double>& x, double topP) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  const std::vector<double> p = softmax(x);
  const double threshold = 1.0 - topP;
  double cumulative = 0.0;
  std::vector<size_t> removed;
  for (size_t r = 0; r + 1 < order.size(); ++r) {
    cumulative += p[order[r]];
    if (cumulative <= threshold) removed.push_back(order[r]);
  }
  for (size_t i : removed) x[i] = kNegInf;
}

}  // namespace

std::vector<double> Sampler::warpedProbabilitiesDouble(const std::vector<float>& logits,
                                                       const SamplingPolicy& policy) {
  policy.validate();
  if (policy.greedy())
    throw UsageError("warped probabilities need a temperature > 0 (temperature 0 is greedy)");
  checkLogits(logits);

  std::vector<double> x(logits.size());
  bool anyFinite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    x[i] = static_cast<double>(logits[i]) / policy.temperature;
    if (std::isinf(x[i]) && std::isfinite(logits[i]))
      throw UsageError("temperature " + std::to_string(policy.temperature) +
                       " is too small for these logits (logit/temperature overflows)");
    anyFinite = anyFinite || std::isfinite(x[i]);
  }
  if (!anyFinite) throw UsageError("every logit is -inf; no token can be chosen");

  if (policy.topK) applyTopK(x, *policy.topK);
  // top-p = 1 keeps everything (transformers does not even install the warper then).
  if (policy.topP && *policy.topP < 1.0) applyTopP(x, *policy.topP);
  return softmax(x);
}

std::vector<float> Sampler::warpedProbabilities(const std::vector<float>& logits,
                                                const SamplingPolicy& policy) {
  const std::vector<double> p = warpedProbabilitiesDouble(logits, policy);
  return std::vector<float>(p.begin(), p.end());
}

std::vector<int64_t> Sampler::tiedAtTop(const std::vector<float>& logits) {
  std::vector<int64_t> out;
  if (logits.empty()) return out;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isnan(logits[i]))
      throw UsageError("logit " + std::to_string(i) + " is NaN; cannot rank tokens");
  const float m = *std::max_element(logits.begin(), logits.end());
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] == m) out.push_back(static_cast<int64_t>(i));
  return out;
}

int64_t Sampler::argmax(const std::vector<float>& logits, SamplingPolicy::TieRule rule) {
  if (logits.empty()) throw UsageError("the logits row is empty");
  const std::vector<int64_t> tied = tiedAtTop(logits);
  return rule == SamplingPolicy::TieRule::Lowest ? tied.front() : tied.back();
}

int64_t Sampler::inverseCdf(const std::vector<double>& probabilities, double u) {
  double total = 0.0;
  int64_t last = -1;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] > 0.0) {
      total += probabilities[i];
      last = static_cast<int64_t>(i);
    }
  }
  if (last < 0) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (!(probabilities[i] > 0.0)) continue;
    cumulative += probabilities[i];
    if (target < cumulative) return static_cast<int64_t>(i);
  }
  return last;
}

SamplingOutcome Sampler::choose(const std::vector<float>& logits, const SamplingPolicy& policy,
                                RequestRng& rng) {
  policy.validate();
  checkLogits(logits);
  SamplingOutcome out;
  out.tiedAtTop = tiedAtTop(logits);
  out.drawsBefore = rng.draws();
  if (policy.greedy()) {
    out.token = policy.tieRule == SamplingPolicy::TieRule::Lowest ? out.tiedAtTop.front()
                                                                  : out.tiedAtTop.back();
    out.probabilities.assign(logits.size(), 0.0f);
    out.probabilities[static_cast<size_t>(out.token)] = 1.0f;
    out.eligible = {out.token};
  } else {
    const std::vector<double> p = warpedProbabilitiesDouble(logits, policy);
    out.uniform = rng.nextUniform();
    out.token = inverseCdf(p, out.uniform);
    out.probabilities.assign(p.begin(), p.end());
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] > 0.0) out.eligible.push_back(static_cast<int64_t>(i));
  }
  out.drawsAfter = rng.draws();
  return out;
}

}  // namespace kvscope
