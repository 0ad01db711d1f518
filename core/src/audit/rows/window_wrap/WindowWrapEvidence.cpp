#include "audit/rows/window_wrap/WindowWrapEvidence.hpp"

#include "audit/NumberText.hpp"

namespace kvscope::detail {

FindingDraft windowWrapFinding(const Trace& trace, const StepAnalysis& onset,
                               const std::vector<StepAnalysis>& steps) {
  const TraceLayerKind kind = trace.layerKind(onset.ringLayer);
  const RingMapProblem& p = onset.ringProblem;
  // The first step after which the ring holds more entries than it has slots: its first wrap.
  int64_t firstWrap = -1, mapsOk = 0, divergedStep = -1, divergedLayer = -1;
  for (const auto& a : steps) {
    if (firstWrap < 0 && a.lastRealStreamIndex() + 1 > kind.ringSlots) firstWrap = a.step->step;
    if (a.step->step < onset.step->step) mapsOk += a.ringMapsChecked;
    if (divergedStep < 0 && a.step->step >= onset.step->step &&
        (a.firstBadLayer >= 0 || a.logitsDiverged)) {
      divergedStep = a.step->step;
      divergedLayer = a.firstBadLayer;
    }
  }
  int64_t fullLayers = 0;
  for (int64_t l = 0; l < trace.model.numLayers; ++l)
    fullLayers += trace.layerKind(l).window > 0 || trace.layerKind(l).chunk > 0 ? 0 : 1;
  std::map<std::string, double> ev{
      {"window", static_cast<double>(kind.window)},
      {"ring_slots", static_cast<double>(kind.ringSlots)},
      {"stream_length", static_cast<double>(onset.lastRealStreamIndex() + 1)},
      {"needed_positions", static_cast<double>(p.needed)},
      {"first_wrapped_step", static_cast<double>(firstWrap)},
      {"onset_is_first_wrap", firstWrap == onset.step->step ? 1.0 : 0.0},
      {"earlier_maps_ok", static_cast<double>(mapsOk)},
      {"full_attention_layers", static_cast<double>(fullLayers)}};
  if (p.position >= 0)
    ev[p.kind == "foreign" ? "foreign_position" : "missing_position"] =
        static_cast<double>(p.position);
  if (p.slot >= 0) ev["slot"] = static_cast<double>(p.slot);
  if (p.slot >= 0) ev["slot_holds"] = static_cast<double>(p.slotHolds);
  if (divergedStep >= 0) ev["first_divergent_step"] = static_cast<double>(divergedStep);
  if (divergedLayer >= 0) ev["first_divergent_layer"] = static_cast<double>(divergedLayer);
  const std::string layer = "layer " + std::to_string(onset.ringLayer);
  std::string when = firstWrap == onset.step->step
                         ? "the first step whose sequence (" +
                               std::to_string(onset.lastRealStreamIndex() + 1) +
                               " tokens) outgrows its " + std::to_string(kind.ringSlots) + " slots"
                         : (firstWrap >= 0 && firstWrap < onset.step->step
                                ? std::to_string(onset.step->step - firstWrap) +
                                      " steps after the ring first wrapped (step " +
                                      std::to_string(firstWrap) + ")"
                                : "before the ring wrapped");
  std::string numbers =
      divergedStep >= 0
          ? "; the numbers diverge from step " + std::to_string(divergedStep) +
                (divergedLayer >= 0 ? " (layer " + std::to_string(divergedLayer) + " first)"
                                    : " (logits)")
          : "; no record or logits row diverges yet";
  return FindingDraft(finding::WindowWrap)
      .at(*onset.step)
      .layer(onset.ringLayer)
      .position(onset.lastRealStreamIndex())
      .confidence(0.95)
      .explanation(
          layer + "'s ring cache (window " + std::to_string(kind.window) + ", " +
          std::to_string(kind.ringSlots) + " slots) after step " +
          std::to_string(onset.step->step) + ", " + when + ": " + p.describe() +
          (mapsOk > 0 ? "; the " + std::to_string(mapsOk) + " earlier slot maps were right" : "") +
          numbers)
      .evidence(ev);
}

}  // namespace kvscope::detail
