#include "audit/rows/rope_scaling/RopeScalingEvidence.hpp"

#include <algorithm>
#include <cmath>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

namespace {
std::vector<double> toVector(const torch::Tensor& t) {
  auto c = t.to(torch::kFloat).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<double>(p, p + c.numel());
}

struct Hypothesis {
  int id;
  std::string description;
  std::vector<double> invFreq;  // [d/2]
  double amplitude = 1.0;       // the path's cos/sin factor over the checkpoint's (yarn's
                                // attention factor dropped: 1 / that factor)
};

// Key column `c` of `rec` [h, s, d] against reference column `p` of `ref` [h, T, d] rotated
// further by (q w'_i - p w_i) per frequency pair (i, i + d/2), as RoPE's rotate_half pairs
// them: the reference rotation undone and redone with the alternative frequencies, and scaled
// by `amplitude` (cos and sin carry yarn's attention factor, so the key's length does too).
struct Rerotated {
  double err = 0, mag = 0;
};
Rerotated rerotatedDiff(const FloatTensor& rec, int64_t c, const FloatTensor& ref, int64_t p,
                        int64_t q, const std::vector<double>& right,
                        const std::vector<double>& alt, double amplitude) {
  Rerotated out;
  const int64_t h = rec.shape[0], s = rec.shape[1], d = rec.shape[2], T = ref.shape[1],
                half = d / 2;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t i = 0; i < half; ++i) {
      const auto iu = static_cast<size_t>(i);
      // Angles as the forward computes them: float32 position x float32 frequency.
      const double a = static_cast<double>(static_cast<float>(q) * static_cast<float>(alt[iu])) -
                       static_cast<double>(static_cast<float>(p) * static_cast<float>(right[iu]));
      const double u = ref.data[static_cast<size_t>((hh * T + p) * d + i)];
      const double v = ref.data[static_cast<size_t>((hh * T + p) * d + i + half)];
      const double zu = amplitude * (u * std::cos(a) - v * std::sin(a)),
                   zv = amplitude * (v * std::cos(a) + u * std::sin(a));
      const double xu = rec.data[static_cast<size_t>((hh * s + c) * d + i)];
      const double xv = rec.data[static_cast<size_t>((hh * s + c) * d + i + half)];
      out.err = std::max({out.err, std::fabs(xu - zu), std::fabs(xv - zv)});
      out.mag = std::max({out.mag, std::fabs(u), std::fabs(v)});
    }
  return out;
}

bool fits(const FloatTensor& rec, const FloatTensor& ref) {
  return rec.shape.size() == 3 && ref.shape.size() == 3 && rec.shape[0] == ref.shape[0] &&
         rec.shape[2] == ref.shape[2] && rec.shape[2] % 2 == 0;
}
}  // namespace

std::optional<RopeScalingEvidence> RopeScalingEvidence::forAudit(const ModelConfig* model,
                                                                 const TraceModelInfo& trace,
                                                                 const Tolerance& tol) {
  ModelConfig config;
  if (model) {
    config = *model;
  } else if (trace.rope) {
    config.recipe.positions = BlockRecipe::Positions::Rope;  // only the rotation matters here
    config.headDim = trace.headDim;
    config.rope = *trace.rope;
  } else {
    return std::nullopt;
  }
  RopeScalingEvidence e(std::move(config), tol);
  if (!e.applies()) return std::nullopt;
  return e;
}

bool RopeScalingEvidence::applies() const {
  // Its re-rotation pairs feature i with i + d/2 across the whole head: a partial rotary
  // head (pairs within its first r features) is not modelled.
  const std::string& type = config_.rope.type;
  return config_.usesRope() && config_.keyRecordsAreRotatedHeads() &&
         (type == "linear" || type == "llama3" || type == "yarn") && config_.headDim % 2 == 0 &&
         config_.rope.partialRotaryFactor == 1.0;
}

std::string RopeScalingEvidence::scalingText() const {
  const RopeConfig& r = config_.rope;
  std::string s = r.type + " (factor " + numberText(r.factor);
  if (r.type == "yarn")
    s += ", original context " + std::to_string(r.originalMaxPositions) + ", attention factor " +
         numberText(RotaryEmbedding::attentionFactorOf(r));
  if (r.type == "llama3")
    s += ", low/high frequency factors " + numberText(r.lowFreqFactor) + "/" +
         numberText(r.highFreqFactor) + ", original context " +
         std::to_string(r.originalMaxPositions);
  return s + ")";
}

std::optional<RopeScalingMatch> RopeScalingEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (!applies() || steps.empty()) return std::nullopt;
  const StepAnalysis& first = *steps.front();
  if (first.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(first.firstBadLayer);
  if (l >= own.keys.size() || l >= first.keyError.size()) return std::nullopt;
  // The signature: this layer's keys diverged while its values (and layer 0's) are exact.
  auto valuesExact = [&](const StepAnalysis& a) {
    return a.valueError.size() > l && a.valueError[l] <= a.valueTol[l] &&
           a.valueError[0] <= a.valueTol[0];
  };
  if (!valuesExact(first) || first.keyError[l] <= first.keyTol[l]) return std::nullopt;
  // rope_scaling is the full-attention layers' RoPE: a sliding layer with its own (Gemma 3's
  // local RoPE) is not what this row models.
  if (!(config_.ropeFor(first.firstBadLayer) == config_.rope)) return std::nullopt;

  const RopeConfig& rope = config_.rope;
  const auto base = RotaryEmbedding::defaultInvFreq(rope.theta, config_.headDim);
  std::vector<Hypothesis> hyps;
  std::vector<double> right;
  if (rope.type == "yarn") {
    // yarn blends interpolated and extrapolated frequencies and scales cos/sin by its
    // attention factor: a path that drops it turns with rope_theta's frequencies at length 1
    // (or keeps the factor and drops the frequencies).
    right = toVector(RotaryEmbedding::yarnInvFreq(rope, config_.headDim));
    const double factor = RotaryEmbedding::attentionFactorOf(rope);
    hyps.push_back({1, "the scaling dropped (the default frequencies of rope_theta, no attention factor)",
                    toVector(base), 1.0 / factor});
    hyps.push_back({5, "yarn's frequencies dropped (the default ones of rope_theta) with its attention factor kept",
                    toVector(base), 1.0});
  } else {
    const auto rightT = RotaryEmbedding::scaled(rope, base);
    right = toVector(rightT);
    hyps.push_back(
        {1, "the scaling dropped (the default frequencies of rope_theta)", toVector(base)});
    hyps.push_back({2, "the scaling applied twice", toVector(RotaryEmbedding::scaled(rope, rightT))});
    RopeConfig inverted = rope;  // a kernel that multiplies by the factor where it should divide
    inverted.factor = 1.0 / rope.factor;
    hyps.push_back({4, "the factor inverted (frequencies multiplied by it instead of divided)",
                    toVector(RotaryEmbedding::scaled(inverted, base))});
  }
  if (rope.type == "llama3") {
    RopeConfig linear = rope;
    linear.type = "linear";
    hyps.push_back({3, "linear scaling by the same factor instead of llama3",
                    toVector(RotaryEmbedding::scaled(linear, base))});
  }
  std::vector<double> worstRatio(hyps.size(), 0.0), worstErr(hyps.size(), 0.0),
      worstTol(hyps.size(), 0.0);
  RopeScalingMatch m;
  const FloatTensor& refK = own.keys[l];
  for (const StepAnalysis* a : steps) {
    if (a->structural() || a->version != first.version || a->referenceMissing) break;
    if (a != &first && !valuesExact(*a)) break;  // from here something else is wrong too
    if (l >= a->step->layers.size()) break;
    const FloatTensor& rec = a->step->layers[l].keys;
    if (!fits(rec, refK)) break;
    for (size_t j = 0; j < a->streamIndex.size(); ++j) {
      const int64_t p = a->streamIndex[j], c = static_cast<int64_t>(j);
      if (p < 0 || p >= refK.shape[1] || c >= rec.shape[1] || j >= a->step->positions.size())
        continue;
      const ColumnDiff key = columnDiff(rec, c, refK, p);
      const double err = key.err;
      if (err <= tol_.forRecord(static_cast<int64_t>(l), p, key.mag))
        continue;  // this key is right
      const int64_t q = a->step->positions[j];
      for (size_t h = 0; h < hyps.size(); ++h) {
        const Rerotated r = rerotatedDiff(rec, c, refK, p, q, right, hyps[h].invFreq, hyps[h].amplitude);
        const double t = tol_.forRecord(static_cast<int64_t>(l), p, r.mag);
        worstRatio[h] = std::max(worstRatio[h], r.err / t);
        worstErr[h] = std::max(worstErr[h], r.err);
        worstTol[h] = std::max(worstTol[h], t);
      }
      if (m.records == 0) {
        m.firstPosition = p;
        m.firstKeyError = err;
      }
      m.lastPosition = p;
      m.lastKeyError = err;
      m.ownError = std::max(m.ownError, err);
      ++m.records;
    }
    m.valueError = std::max(m.valueError, a->valueError[l]);
    m.layer0ValueError = std::max(m.layer0ValueError, a->valueError[0]);
  }
  if (m.records == 0) return std::nullopt;
  size_t best = hyps.size();
  for (size_t h = 0; h < hyps.size(); ++h)
    if (worstRatio[h] <= 1.0 && (best == hyps.size() || worstRatio[h] < worstRatio[best])) best = h;
  if (best == hyps.size()) return std::nullopt;
  m.hypothesis = hyps[best].id;
  m.description = hyps[best].description;
  m.rerotatedError = worstErr[best];
  m.amplitude = hyps[best].amplitude;
  m.tolerance = worstTol[best];
  for (size_t i = 0; i < right.size(); ++i)
    m.radiansPerPosition =
        std::max(m.radiansPerPosition, std::fabs(hyps[best].invFreq[i] - right[i]));
  if (rope.type == "linear" && m.hypothesis == 1)
    m.equivalentPosition = rope.factor * static_cast<double>(m.firstPosition);
  return m;
}

FindingDraft RopeScalingEvidence::finding(const StepAnalysis& a, const RopeScalingMatch& m,
                                          std::map<std::string, double> ev) const {
  const auto l = static_cast<size_t>(a.firstBadLayer);
  ev["hypothesis"] = static_cast<double>(m.hypothesis);
  ev["rope_factor"] = config_.rope.factor;
  ev["key_error"] = m.firstKeyError;
  ev["value_error"] = m.valueError;
  ev["layer0_value_error"] = m.layer0ValueError;
  ev["rerotated_key_error"] = m.rerotatedError;
  ev["tolerance"] = m.tolerance;
  ev["own_reference_error"] = m.ownError;
  ev["records_compared"] = static_cast<double>(m.records);
  ev["first_position"] = static_cast<double>(m.firstPosition);
  ev["last_position"] = static_cast<double>(m.lastPosition);
  ev["key_error_first_position"] = m.firstKeyError;
  ev["key_error_last_position"] = m.lastKeyError;
  ev["radians_per_position"] = m.radiansPerPosition;
  ev["key_length_ratio"] = m.amplitude;
  if (m.equivalentPosition >= 0) ev["equivalent_position"] = m.equivalentPosition;
  const std::string layer = std::to_string(l);
  std::string ex =
      "layer " + layer + "'s new keys differ from the reference (key error " +
      numberText(m.firstKeyError) + " at position " + std::to_string(m.firstPosition) +
      ") while its values are exact (value error " + numberText(m.valueError) +
      (l > 0 ? ", layer 0's " + numberText(m.layer0ValueError) : std::string()) +
      "): they equal the reference keys rotated with " + m.description +
      " instead of the checkpoint's rope_scaling " + scalingText() + " (max diff " +
      numberText(m.rerotatedError) + " over " + std::to_string(m.records) +
      " key record(s) at positions " + std::to_string(m.firstPosition) + ".." +
      std::to_string(m.lastPosition) + ", tolerance " + numberText(m.tolerance) +
      "). The two rotations differ by up to " + numberText(m.radiansPerPosition) +
      " rad per position, an offset that grows with position from 0 at position 0" +
      (m.amplitude != 1.0 ? ", and the keys' length by the factor " + numberText(m.amplitude) +
                                " (yarn's attention factor dropped) at every position"
                          : std::string()) +
      " (key error " + numberText(m.firstKeyError) + " at position " + std::to_string(m.firstPosition) + ", " +
      numberText(m.lastKeyError) + " at position " + std::to_string(m.lastPosition) +
      "): the path that computed these keys uses another RoPE scaling";
  if (m.equivalentPosition >= 0)
    ex += "; with the linear factor dropped the key at position " +
          std::to_string(m.firstPosition) + " equals the right key at position " +
          numberText(m.equivalentPosition) +
          ", which reads as a position offset, but the recorded positions are right and the "
          "dropped factor reproduces every record";
  if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
  return FindingDraft(finding::RopeScaling)
      .at(*a.step)
      .layer(a.firstBadLayer)
      .position(a.firstBadStreamIndex)
      .confidence(0.95)
      .explanation(ex)
      .evidence(ev);
}

}  // namespace kvscope::detail
