// What a front end shows of an audit, computed once, here: the cache a request really held
// after a step beside the reference, their difference for one layer and kv head, the head
// that differs most, per-layer maxima against the audit's own tolerances, the logit delta,
// the request's token stream with its positions and events, and where each finding is.
// The GUI (ui/) and the terminal front end (`kvscope-cli inspect`) draw these values and
// compute nothing of their own.
//
// Threading: an Inspector is single-threaded. view() and worstHead() compare cache tensors
// and view() keeps a small cache of per-layer maxima, so call them from one thread (the
// GUI's engine thread). The const queries that do no tensor work (requests(), steps(),
// clamp(), firstDivergence(), locate(), timeline(), findingsAt(), tokenLabel()) only read
// the immutable output and the timelines built in the constructor, from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kvscope/AuditJob.hpp"

namespace kvscope {

/// One request, one of its steps, one layer, one kv head, keys or values.
struct InspectionPoint {
  int64_t request = 0;  // TraceRequest::id
  int64_t step = 0;     // TraceStep::step of that request (0 = prefill)
  int64_t layer = 0;
  int64_t head = 0;  // kv head
  KvKind kind = KvKind::Keys;
  bool autoHead = false;  // view(): use the kv head whose cache differs most at the layer
  bool autoKind = false;  // view(): use keys or values, whichever is further past tolerance

  bool operator==(const InspectionPoint& o) const {
    return request == o.request && step == o.step && layer == o.layer && head == o.head &&
           kind == o.kind && autoHead == o.autoHead && autoKind == o.autoKind;
  }
  bool operator!=(const InspectionPoint& o) const { return !(*this == o); }
};

/// One layer and kv head of a request's cache after a step, beside the reference, plus the
/// per-layer and logit numbers of that step. Copies, never pointers into the result.
struct StepView {
  InspectionPoint requested;  // the point asked for
  InspectionPoint point;      // what is shown (head and kind resolved, auto flags cleared)

  // Buffers are [t, d] row-major (index = position * headDim + dim).
  int64_t headDim = 0;
  int64_t cachedPositions = 0;     // t of the cached path
  int64_t referencePositions = 0;  // t of the reference (0: no reference)
  std::vector<float> cached;       // [cachedPositions, headDim]
  std::vector<float> reference;    // [referencePositions, headDim]
  std::vector<float> absDiff;      // [min(t_cached, t_ref), headDim]
  float valueAbsMax = 0.0f;        // max |x| over cached and reference (shared colour range)
  float diffMax = 0.0f;            // max of absDiff
  int64_t diffArgPosition = -1;    // where diffMax sits
  int64_t diffArgDim = -1;
  int64_t worstHead = -1;      // kv head whose whole cache at this layer differs most (a state: value head)
  int64_t heads = 0;           // heads the shown layer has (its KV heads; a recurrent layer: value heads)
  int64_t appendedFirst = -1;  // cache positions of the step's own real tokens:
  int64_t appendedCount = 0;   // [appendedFirst, appendedFirst + appendedCount)

  std::vector<double> layerMaxDiff;  // [layers] whole-cache max |cached - reference| (kind; a
                                     // recurrent layer: its state's, where the step recorded it)
  /// The audit's tolerance at this step (the numbers stages 2 and 4 judged by): below it a
  /// difference is precision noise. Empty / 0 when the step was not audited.
  std::vector<double> layerNoiseFloor;  // [layers] for the shown kind
  double logitNoiseFloor = 0.0;
  /// The floor the shown difference is judged by: layerNoiseFloor at the shown layer, else
  /// 1e-4 x max(1, valueAbsMax) when the step was not audited.
  double diffFloor = 0.0;
  /// Why the cache at this layer and step is structurally wrong (its length differs from the
  /// reference's, its shape does, or its row was overwritten in a way the records cannot
  /// show), so that a difference under the floor is still not noise; "" when it is not.
  std::string diffStructure;
  /// The one rule the front ends label the difference heatmap by: precision noise only when
  /// every compared entry is under the floor and the cache's structure is right.
  bool diffIsNoise() const { return diffMax <= diffFloor && diffStructure.empty(); }

  std::vector<float> logitDelta;  // [V] cached - reference logits row of the step
  double maxAbsLogitDelta = 0.0;

  /// The engine's recorded checksum of this cache row no longer matches its appended
  /// records: rows were overwritten after they were appended (another request, a batch row
  /// written twice), which the records alone cannot show.
  bool rowRewritten = false;
  /// With rowRewritten: `cached` is the row rebuilt from every write into its slot (it
  /// reproduces the recorded checksum) instead of the request's own records.
  bool cachedFromReplay = false;
  /// Cache positions whose rebuilt row differs from the request's own records.
  std::vector<int64_t> rewrittenPositions;

  std::vector<Finding> findings;  // the report's findings at this request and step
  std::string note;               // why something is missing or shapes differ ("" = fine)
  std::string layerKind;          // what the shown layer is (AuditJobOutput::layerKinds; "": unknown)
  /// The shown layer is recurrent and the step recorded its state: cached, reference and
  /// absDiff hold value head `point.head`'s recurrent state [Dk, Dv] after the step (rows: key
  /// features, not positions; cachedPositions = Dk, headDim = Dv).
  bool showsState = false;
  /// The shown layer holds latent rows (multi-head latent attention): its keys are the latent
  /// rows c_kv, its values the roped key parts k_pe shared by every head.
  bool showsLatent = false;
};

/// One fed entry of a step (pads included, marked) or a generated token never fed back.
struct TimelineToken {
  int64_t id = -1;
  std::string piece;      // its text (empty when the audit had no tokenizer)
  int64_t position = -1;  // position id the engine used (-1: not fed)
  int64_t stream = -1;    // index in the request's stream (prompt + generated); -1: a pad
  bool real = true;       // false: padding of a left-padded batch
  bool prompt = false;
};

struct TimelineStep {
  int64_t step = 0;
  int64_t tick = 0;
  std::vector<TimelineToken> fed;
  int64_t expectedPosition = -1;     // real tokens consumed up to this step, minus one
  int64_t recordedPosition = -1;     // largest position id of a real fed token (-1: none)
  std::vector<int64_t> cacheLength;  // [layers] records in the cache after the step
  std::vector<std::string> events;   // the step's own events
  bool diverged = false;
};

/// Something that happened while a request ran, on the step it ran at that tick: the
/// step's own events, another request's arrival, a trace-level event (weight update, ...).
struct TimelineMarker {
  int64_t step = 0;
  std::string kind;    // arrival | weight_update | context_limit | eos | other_arrival |
                       // kv_cache | speculative | rollback_skipped | rope | rope_scaling | batch |
                       // batch_variance | window_wraps | window_wrap | prefix_hit |
                       // prefix_reuse | ...
  std::string label;   // e.g. "req 1 arrives (tick 3), same row"
  bool alarm = false;  // a setting in which cache bugs show (weight update, shared row, limit)
};

/// A request's stream as the inspector draws it: every step in order, the tokens chosen
/// but never fed back, the first divergent step and the events on the way.
struct RequestTimeline {
  int64_t request = 0;
  std::vector<TimelineStep> steps;
  std::vector<TimelineToken> unfed;  // generated after the last recorded step
  int64_t divergentStep = -1;        // first diverged step of this request (-1: none)
  std::vector<TimelineMarker> markers;
};

/// Answers a front end's questions about one audit output. See the threading note above.
class Inspector {
 public:
  explicit Inspector(std::shared_ptr<const AuditJobOutput> output);

  const AuditJobOutput& output() const { return *output_; }
  const std::shared_ptr<const AuditJobOutput>& sharedOutput() const { return output_; }

  // Shape of the data (cheap).
  std::vector<int64_t> requests() const;
  std::vector<int64_t> steps(int64_t request) const;  // step numbers in order
  int64_t layers() const;
  int64_t kvHeads() const;
  /// The heads `layer` shows: its KV heads, or a recurrent layer's value heads (those of a
  /// recorded state; the KV heads when the trace records none).
  int64_t headsAt(int64_t layer) const;
  /// Every field moved to the nearest existing value (a missing step to the nearest
  /// recorded one at or below it); the auto flags are kept.
  InspectionPoint clamp(InspectionPoint p) const;

  /// Everything a step view draws at `p`. Cost: the chosen layer's cache rebuilt and
  /// compared, O(h_kv * t * d); the per-layer maxima O(L * h_kv * t * d) on the first visit
  /// of a (request, step, kind), O(L * h_kv * s * d) when stepping forward in an
  /// append-only trace, free on a revisit (cached).
  StepView view(const InspectionPoint& p);
  /// The report's first divergence as a point (head and kind auto); nullopt when clean.
  std::optional<InspectionPoint> firstDivergence() const;
  /// Where a finding points: its request, step and layer (the first divergence's layer,
  /// else 0, when it names none), head and kind auto.
  InspectionPoint locate(const Finding& finding) const;
  /// The kv head whose whole cache after (request, step) at `layer` differs most from the
  /// reference (rewritten rows rebuilt when the checksum says so); a recurrent layer: the value
  /// head whose state differs most; -1 when none compares. Cost O(h_kv * t * d).
  int64_t worstHead(int64_t request, int64_t step, int64_t layer, KvKind kind) const;

  /// The request's stream, steps and events (built once in the constructor, O(fed
  /// tokens) for the whole trace); an empty timeline for an unknown request.
  const RequestTimeline& timeline(int64_t request) const;
  /// The report's findings at (request, step).
  std::vector<Finding> findingsAt(int64_t request, int64_t step) const;
  /// The reference logits row of (request, step): real tokens consumed up to and including
  /// the step, minus one; -1 when the step is unknown.
  int64_t referenceRow(int64_t request, int64_t step) const;
  /// A token's text for labels: "'piece' #id" when the request's stream holds it, else "#id".
  std::string tokenLabel(int64_t request, int64_t tokenId) const;

 private:
  const std::vector<double>& layerDiffs(int64_t request, int64_t step, KvKind kind);

  std::shared_ptr<const AuditJobOutput> output_;
  bool appendOnly_ = false;  // no snapshots: caches only grow (stepping can extend maxima)
  std::map<std::tuple<int64_t, int64_t, int>, std::vector<double>> layerCache_;
  std::map<int64_t, RequestTimeline> timelines_;  // per request id
  RequestTimeline noTimeline_;
};

}  // namespace kvscope
