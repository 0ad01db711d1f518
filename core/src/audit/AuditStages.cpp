#include "kvscope/AuditStages.hpp"

namespace kvscope {

const std::vector<AuditStageInfo>& auditStages() {
  static const std::vector<AuditStageInfo> stages = {
      {AuditStage::Reference, 1, "reference", "Uncached reference"},
      {AuditStage::Cache, 2, "cache", "Cache construction"},
      {AuditStage::Positions, 3, "positions", "Positions and requests"},
      {AuditStage::Numerics, 4, "numerics", "Numerical equivalence"},
      {AuditStage::Policy, 5, "policy", "Sampling policy"},
      {AuditStage::Stopping, 6, "stopping", "Stopping"},
  };
  return stages;
}

const AuditStageInfo& auditStage(AuditStage stage) { return auditStages()[stageIndex(stage)]; }

}  // namespace kvscope
