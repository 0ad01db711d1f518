// Temporary link shim, compiled only while the core has no SamplingPolicy sources (they
// live on branch `policy`; ui/CMakeLists.txt checks for them). Trace.cpp's
// TraceRequest::operator== needs SamplingPolicy::operator==; the UI never compares
// policies. The definition matches the field-by-field comparison the header implies.
#include "kvscope/SamplingPolicy.hpp"

namespace kvscope {

bool SamplingPolicy::operator==(const SamplingPolicy& o) const {
  return temperature == o.temperature && topK == o.topK && topP == o.topP && seed == o.seed &&
         tieRule == o.tieRule;
}

}  // namespace kvscope
