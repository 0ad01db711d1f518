// A request's reference gathered from a reference trace (referenceFromTrace's rule), with the
// option of taking the trace's records instead of copying them.
#pragma once

#include <cstdint>

#include "kvscope/AuditResult.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// referenceFromTrace(t, request); with `consume`, each layer's records of the request's
/// steps are freed once the reference holds them: only for a trace the caller owns and no
/// longer reads records of (trace+trace audits: ReferenceSet's own copy).
RequestReference gatherReference(const Trace& t, int64_t request, bool consume);

}  // namespace kvscope::detail
