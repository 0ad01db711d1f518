#include "audit/Tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvscope::detail {

std::string Tolerance::canonical(const std::string& d) {
  std::string s = d;
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "bfloat16" || s == "bf16" || s == "BF16") return "bfloat16";
  if (s == "float16" || s == "fp16" || s == "F16" || s == "half") return "float16";
  return "float32";
}

// Calibration (docs/audit.md): float32 cached-vs-recompute noise <= 4.7e-6 relative on the
// logits; bf16/f16 compute against the float32 reference: see the table there.
double Tolerance::recordBaseFor(const std::string& d) {
  const std::string c = canonical(d);
  if (c == "bfloat16") return 4e-2;
  if (c == "float16") return 6e-3;
  return 5e-5;
}

double Tolerance::logitBaseFor(const std::string& d) {
  const std::string c = canonical(d);
  if (c == "bfloat16") return 4e-2;
  if (c == "float16") return 5e-3;
  return 5e-5;
}

double Tolerance::unitRoundoff(const std::string& d) {
  const std::string c = canonical(d);
  if (c == "bfloat16") return std::ldexp(1.0, -8);
  if (c == "float16") return std::ldexp(1.0, -11);
  return std::ldexp(1.0, -24);
}

double Tolerance::depthFactor(int64_t layer) {
  return 1.0 + static_cast<double>(std::max<int64_t>(layer, 0));
}

double Tolerance::positionFactor(int64_t position) {
  return 1.0 + std::log2(1.0 + static_cast<double>(std::max<int64_t>(position, 0))) / 16.0;
}

double Tolerance::scoreScaleFor(double attentionFactor) {
  return std::max(1.0, attentionFactor * attentionFactor);
}

Tolerance::Tolerance(const std::string& computeDtype, double scale, const std::string& storageDtype,
                     int64_t numLayers, KvQuantization cache, bool referenceRounded,
                     double attentionFactor)
    : dtype_(canonical(computeDtype.empty() ? "float32" : computeDtype)),
      scoreScale_(scoreScaleFor(attentionFactor)),
      recordBase_(recordBaseFor(dtype_) * scale * scoreScale_),
      logitBase_(logitBaseFor(dtype_) * scale * scoreScale_),
      storageFloor_(2.0 * unitRoundoff(storageDtype)),
      numLayers_(numLayers),
      cache_(std::move(cache)),
      referenceRounded_(referenceRounded),
      quantRelative_((referenceRounded
                          ? std::max(kRoundingFlipCarry, kQuantizationCarry * flipFraction())
                          : kQuantizationCarry) *
                     cache_.relativeHalfStep() * scale) {}

double Tolerance::flipFraction() const {
  const double u = cache_.relativeHalfStep();
  if (!referenceRounded_ || u <= 0) return 0.0;
  return std::min(1.0, recordBase_ / u);
}

double Tolerance::forRecord(int64_t layer, int64_t position, double maxAbs) const {
  const double m = std::max(1.0, maxAbs);
  const double carried = quantRelative_ * static_cast<double>(std::max<int64_t>(layer, 0));
  return std::min(recordBase_ * depthFactor(layer) * positionFactor(position) + carried,
                  kMaxRelative) *
             m +
         storageFloor_ * m + (referenceRounded_ ? 2.0 : 1.0) * cache_.halfStep(layer, maxAbs);
}

double Tolerance::forRowScale(int64_t layer, int64_t position, double maxAbs) const {
  return forRecord(layer, position, maxAbs) -
         (referenceRounded_ ? 2.0 : 1.0) * cache_.halfStep(layer, maxAbs);
}

double Tolerance::forLogits(int64_t position, double maxAbs) const {
  const double carried = quantRelative_ * static_cast<double>(std::max<int64_t>(numLayers_, 0));
  return std::min(logitBase_ * depthFactor(numLayers_) * positionFactor(position) + carried,
                  kMaxRelative) *
         std::max(1.0, maxAbs);
}

std::string Tolerance::describe() const {
  std::ostringstream os;
  os.precision(3);
  os << dtype_ << ": K/V records min(" << recordBase_ << " x (1 + layer) x (1 + log2(1 + pos)/16), "
     << kMaxRelative << ") x max(1, |ref|)";
  if (storageFloor_ > 1e-6) os << " + " << storageFloor_ << " x max(1, |ref|) (trace storage)";
  if (scoreScale_ > 1.0)
    os << " (bases x " << scoreScale_ << ", the square of the RoPE attention factor that scales the scores)";
  os << "; logits min(" << logitBase_ << " x " << depthFactor(numLayers_) << " (depth "
     << numLayers_ << ") x (1 + log2(1 + pos)/16), " << kMaxRelative << ") x max(1, |ref|)";
  if (cache_.quantized())
    os << "; quantised cache (" << cache_.describe() << "), reference "
       << (referenceRounded_ ? "rounded alike: records + one quantisation step"
                             : "not rounded: records + half a quantisation step")
       << " (" << cache_.relativeHalfStep() << " x |record| per half step), + " << quantRelative_
       << " x layer inside the cap for the rounding earlier layers read, logits + "
       << quantRelative_ << " x " << numLayers_ << " inside the cap";
  if (cache_.quantized() && referenceRounded_)
    os << " + " << flipFraction()
       << " x how far the rounding moves the position's logits (rounded vs unrounded reference)";
  return os.str();
}

}  // namespace kvscope::detail
