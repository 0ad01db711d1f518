// The audit's six stages in dependency order (docs/audit.md): their ids (the JSON
// contract), numbers and titles, in one catalogue used by the audit, the reports and the
// UI. A later stage's failure is only read once every earlier stage passed.
#pragma once

#include <cstddef>
#include <vector>

namespace kvscope {

enum class AuditStage { Reference = 1, Cache, Positions, Numerics, Policy, Stopping };

struct AuditStageInfo {
  AuditStage stage;
  int number;         // 1..6
  const char* id;     // reference | cache | positions | numerics | policy | stopping
  const char* title;  // "Uncached reference", ...
};

/// Every stage, in order.
const std::vector<AuditStageInfo>& auditStages();
const AuditStageInfo& auditStage(AuditStage stage);
/// Where the stage sits in AuditReport::stages.
inline size_t stageIndex(AuditStage stage) { return static_cast<size_t>(stage) - 1; }

}  // namespace kvscope
