// Stage 1's `reference` findings: the uncached reference is wrong or does not fit the run.
#pragma once

#include <map>
#include <string>

#include "kvscope/AuditReport.hpp"

namespace kvscope::detail {

/// A `reference` finding of the whole run (no request, step or layer).
Finding referenceFinding(const std::string& explanation, std::map<std::string, double> ev = {});

}  // namespace kvscope::detail
