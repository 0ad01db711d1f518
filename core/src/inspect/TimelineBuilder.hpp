// A request's timeline for the inspector (Inspector::timeline): its fed tokens with their
// pieces, positions and padding, cache lengths, the first divergent step and the events
// that happened while it ran. A plain function of the immutable audit output.
#pragma once

#include <cstdint>
#include <string>

#include "kvscope/Inspection.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class TimelineBuilder {
 public:
  static RequestTimeline build(const AuditJobOutput& output, int64_t request);
  /// The one rule for where a request arrives: the step that records an "arrival" event
  /// (KV Scope's engine), or, for a request none of whose steps records one (traces written
  /// by other recorders, e.g. python/kvscope_trace's transformers recorder), its first
  /// recorded step.
  static bool arrivesAt(const Trace& trace, const TraceStep& step);
  /// "'piece' #id" when the request's stream holds the token, else "#id".
  static std::string tokenLabel(const AuditJobOutput& output, int64_t request, int64_t tokenId);
};

}  // namespace kvscope::detail
