// A request's timeline for the inspector (Inspector::timeline): its fed tokens with their
// pieces, positions and padding, cache lengths, the first divergent step and the events
// that happened while it ran. A plain function of the immutable audit output.
#pragma once

#include <cstdint>
#include <string>

#include "kvscope/Inspection.hpp"

namespace kvscope::detail {

class TimelineBuilder {
 public:
  static RequestTimeline build(const AuditJobOutput& output, int64_t request);
  /// "'piece' #id" when the request's stream holds the token, else "#id".
  static std::string tokenLabel(const AuditJobOutput& output, int64_t request, int64_t tokenId);
};

}  // namespace kvscope::detail
