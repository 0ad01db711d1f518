// The check the rotation rows share (qk_norm_order, nope_layer_rope, layer_rope_theta,
// partial_rotary): at a request's first divergence a layer's new keys differ from the
// reference while its values are exact, and every key record of that layer, from that step
// on, equals the reference key put through one transform (the hypothesis: the reference key
// unrotated and rotated another way). A record the transform does not give ends the match.
// Latent attention (MLA) caches its rotated part as the value records (the roped key parts
// k_pe) beside exact latent rows: there the roles of keys and values swap (RotatedRecords).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <torch/torch.h>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

/// Which of a layer's records carry the rotation: the keys (per-head K/V), or the values (MLA's
/// roped key parts k_pe, beside latent rows as keys).
enum class RotatedRecords { Keys, Values };

struct KeyRecordMatch {
  RotatedRecords rotated = RotatedRecords::Keys;
  int64_t layer = -1;
  double hypothesisError = 0;  // max |record - transformed reference key| over every record
  double tolerance = 0;        // the largest record tolerance among them
  double ownError = 0;         // max |record key - reference key|
  int64_t records = 0;         // key records compared (every real column of the steps)
  int64_t diverged = 0;        // among them, those outside tolerance of the reference
  int64_t firstPosition = -1, lastPosition = -1;  // first and last diverged stream positions
  double firstKeyError = 0, lastKeyError = 0;
  double valueError = 0;       // max error of the layer's other records (values; MLA: latent
                               // rows) over the compared steps
  bool positionZeroExact = false;  // a record at position 0 was compared and is right
};

/// refCols: the reference keys of the compared positions, [1, h, n, d] float; positions: [n]
/// int64. Returns the hypothesis keys [1, h, n, d] (any floating dtype).
using KeyTransform = std::function<torch::Tensor(const torch::Tensor& refCols, const torch::Tensor& positions)>;

/// The layer is the first step's firstBadLayer; the rotated records must be [h, t, width].
/// nullopt when the signature is not there (no layer, the other records inexact, the rotated
/// ones exact), when one record differs from the transform's, or when no record diverged.
std::optional<KeyRecordMatch> matchKeyRecords(const std::vector<const StepAnalysis*>& steps,
                                              const RequestReference& own, const Tolerance& tol,
                                              int64_t width, const KeyTransform& transform,
                                              RotatedRecords rotated = RotatedRecords::Keys);
/// What a match's records are called in explanations: {rotated, other} ("keys", "values"; MLA:
/// "roped key parts (k_pe)", "latent rows").
std::pair<std::string, std::string> recordNames(const KeyRecordMatch& m);

/// Evidence entries every rotation row reports (key_error, value_error, tolerance, ...);
/// `hypothesisKey` names the transformed-key error ("toggled_rotation_key_error").
void addKeyRecordEvidence(std::map<std::string, double>& ev, const KeyRecordMatch& m,
                          const std::string& hypothesisKey);

/// The finding of row `id` at `a` with explanation `ex`, which gets `positionZero` (why the
/// key at position 0 is right) when such a record was compared, and the logits' move.
FindingDraft keyRecordFinding(const char* id, const StepAnalysis& a, const KeyRecordMatch& m,
                              std::string ex, const std::string& positionZero,
                              std::map<std::string, double> ev);

}  // namespace kvscope::detail
