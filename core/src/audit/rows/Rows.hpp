// One accessor per row module (each defined in its own folder under rows/). RowRegistry.cpp
// orders them; nothing else names a row.
#pragma once

#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail::rows {

const FailureRow& reference();
const FailureRow& position();
const FailureRow& wrongLayer();
const FailureRow& duplicateAppend();
const FailureRow& crossRequest();
const FailureRow& tieRule();
const FailureRow& rngOrder();
const FailureRow& staleCache();
const FailureRow& contextLimit();
const FailureRow& slidingWindow();
const FailureRow& drift();
const FailureRow& speculativeRollback();
const FailureRow& kvQuantization();
const FailureRow& ropeScaling();
const FailureRow& chunkPosition();
const FailureRow& batchVariance();
const FailureRow& prefixReuse();
const FailureRow& windowWrap();
const FailureRow& qkNormOrder();
const FailureRow& nopeLayerRope();
const FailureRow& softcapDropped();
const FailureRow& layerRopeTheta();
const FailureRow& partialRotary();
const FailureRow& sinkDropped();
const FailureRow& mlaAbsorb();
const FailureRow& scoreMscale();
const FailureRow& yarnAttentionFactor();
const FailureRow& expertRouting();
const FailureRow& chunkMask();
const FailureRow& temperaturePosition();
const FailureRow& recurrentState();
const FailureRow& stateRollback();
const FailureRow& prefixState();

}  // namespace kvscope::detail::rows
