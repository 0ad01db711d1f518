// Numerical tolerance of the audit: how far a cached run's K/V records and logits may sit
// from the float32 reference before they count as different. It follows the trace's
// compute dtype, grows with depth and position the way precision drift grows, and never
// drops below what the trace's own storage dtype can represent.
//
//   record(layer l, position p, magnitude m) = min(base(dtype) * depth(l) * pos(p), 0.25) * max(1,
//   m)
//                                            + storage floor
//   logits(p, m)                             = min(logitBase(dtype) * depth(L) * pos(p), 0.25) *
//   max(1, m) depth(l) = 1 + l              pos(p) = 1 + log2(1 + p) / 16 storage floor = 2 * unit
//   roundoff of the trace's K/V storage dtype * max(1, m)
//
// A quantised cache (trace field kv_cache) adds what its element type cannot represent
// (u = KvQuantization::relativeHalfStep, step = KvQuantization::step):
//   reference rounded the same way (model modes; a reference trace declaring the same cache):
//     record + step(layer, m)            an element near a rounding edge may round the other way
//            + c x u x layer inside the cap     what such flips carry into later layers
//     logits + c x u x layers inside the cap
//            + f x rounding effect       f of what the whole rounding moves that position's
//                                        logits (rounded vs unrounded reference; model modes)
//     f = min(1, base / u), the share of elements whose rounding a compute dtype's noise can
//     flip (float32 4e-4 of fp8_e4m3's; bf16 all of int8's), c = max(0.5, 10 f)
//   reference not rounded (a trace+trace audit against an unquantised reference trace):
//     record + step(layer, m) / 2        the record's own rounding
//            + 10 x u x layer inside the cap    the rounding earlier layers' attention read
//     logits + 10 x u x layers inside the cap
// Layer 0's records depend on no cache, so there the budget is the rounding alone: a wrong
// scale shows at layer 0 as an error of whole quantisation steps. 10 is the factor the bf16
// bases carry over bf16's unit roundoff (4e-2 vs 2^-8); a float reference of a deep model
// under an fp8 cache reaches the cap, where only errors of a record's size are bugs.
//
// A RoPE whose attention factor a > 1 (YaRN's mscale, LongRoPE's scaling factor) multiplies
// the cos/sin tables and so every attention score by a^2: the scores' rounding noise grows with
// them, and both bases carry max(1, a^2) (GPT-OSS's a = 1.35, Phi-3's LongRoPE 1.43: bf16 runs
// of transformers sit at 1.7x and 1.2x of the unscaled bases).
//
// The caps (a quarter of the magnitude for K/V, 15% for logits) keep deep reduced-precision
// runs auditable: another layer's or position's K/V differs by about its whole magnitude,
// and a bug moves logits by tens of percent, while bf16 drift of a real model stays well
// below both (a 44-layer bf16 run of the independent engine: K/V at 7% of the tolerance,
// logits 0.07 on magnitude 6.5).
//
// The bases are calibrated on real noise (docs/audit.md "Tolerances"): cached vs full
// recompute on a GPU (tests/fixtures/hf/calibration/precision_noise.json) and bf16/f16
// runs of the independent PyTorch engine against the float32 reference. They sit well
// above that noise and far below the executed bugs of the method (wrong layer 3.70,
// wrong position 23.0 on logits of magnitude ~10; a wrong-layer record differs by about its
// own magnitude).
#pragma once

#include <cstdint>
#include <string>

#include "kvscope/KvQuantization.hpp"

namespace kvscope::detail {

class Tolerance {
 public:
  /// `computeDtype`: the trace's compute_dtype; `storageDtype`: how its K/V tensors are
  /// stored (F32 | F16 | BF16); `numLayers`: depth used for the logits.
  explicit Tolerance(const std::string& computeDtype, double scale = 1.0,
                     const std::string& storageDtype = "F32", int64_t numLayers = 0,
                     KvQuantization cache = {}, bool referenceRounded = true,
                     double attentionFactor = 1.0);
  /// Absolute tolerance for a K/V record of `layer` at stream position `position` whose
  /// reference magnitude is `maxAbs`.
  double forRecord(int64_t layer, int64_t position, double maxAbs) const;
  /// The same without the quantisation step: how far the largest magnitude of one row (one
  /// token, one kv head) of a per_token_head cache may move, since a symmetric absmax scale
  /// stores that element exactly. A wrong scale moves it even when no element moves by a
  /// whole step.
  double forRowScale(int64_t layer, int64_t position, double maxAbs) const;
  /// A mixture of experts' near-tie margin (kvscope/ExpertRouting.hpp): how far apart two
  /// experts' router logits at `layer` and `position` may lie, for a router row whose largest
  /// |logit| is `maxAbs`, and still be ranked either way by this run's rounding. The router
  /// reads the layer's hidden state after its attention, as the next layer's K/V projections
  /// do: twice (two logits, each off by its noise) the next layer's record tolerance.
  double routerMargin(int64_t layer, int64_t position, double maxAbs) const {
    return 2.0 * forRecord(layer + 1, position, maxAbs);
  }
  /// Absolute tolerance for a logits row at `position` whose reference magnitude is `maxAbs`.
  double forLogits(int64_t position, double maxAbs) const;
  /// The relative base for K/V records at layer 0 (and for logits before the depth factor).
  double relative() const { return recordBase_; }
  double logitRelative() const { return logitBase_; }
  const std::string& dtype() const { return dtype_; }
  /// max(1, a^2) for the RoPE attention factor a the bases carry (header comment).
  double scoreScale() const { return scoreScale_; }
  static double scoreScaleFor(double attentionFactor);
  /// Canonical dtype name: float32 | bfloat16 | float16 (accepts torch and safetensors names).
  static std::string canonical(const std::string& dtype);
  static double recordBaseFor(const std::string& computeDtype);
  static double logitBaseFor(const std::string& computeDtype);
  /// The unit roundoff of a storage dtype (F32 2^-24, F16 2^-11, BF16 2^-8).
  static double unitRoundoff(const std::string& dtype);
  static double depthFactor(int64_t layer);
  static double positionFactor(int64_t position);
  static constexpr double kMaxRelative = 0.25;       // K/V records
  static constexpr double kMaxLogitRelative = 0.15;  // logits
  static constexpr double kQuantizationCarry = 10.0;  // unrounded reference (header comment)
  static constexpr double kRoundingFlipCarry = 0.5;   // rounded reference
  /// The quantised cache this audit budgets for (not quantised when the trace says none).
  const KvQuantization& cache() const { return cache_; }
  /// Added to the relative base per layer for a quantised cache (0 otherwise).
  double quantizationRelative() const { return quantRelative_; }
  /// The share of a quantised cache's elements whose rounding the compute dtype's noise may
  /// flip against a rounded reference (0 when not quantised or the reference is not rounded).
  double flipFraction() const;
  /// Whether the reference's K/V entries were rounded as the cache rounds them.
  bool referenceRounded() const { return referenceRounded_; }
  /// One line for reports: the formula with this audit's numbers.
  std::string describe() const;

 private:
  std::string dtype_;
  double scoreScale_;
  double recordBase_;
  double logitBase_;
  double storageFloor_;
  int64_t numLayers_;
  KvQuantization cache_;
  bool referenceRounded_ = true;
  double quantRelative_ = 0.0;
};

}  // namespace kvscope::detail
