// The report's findings grouped for the views: a bug that several requests show is one
// finding per request in the report (each with its own onset step, layer and evidence);
// the views list it once, with the requests and their onsets ("2 requests: 0 at step 3,
// 2 at step 5"). The grouping rule lives here, so the GUI and the terminal agree.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"

namespace kvscope {

struct FindingGroup {
  std::string id;
  std::string causedBy;                // "" for a root group
  int depth = 0;                       // 1: shown under its root's group
  std::vector<const Finding*> members;  // one per request, in the report's order (earliest first)

  const Finding& first() const { return *members.front(); }
  /// "request 0 at step 3" for one member; "2 requests: 0 at step 3, 2 at step 5" for several.
  std::string onsets() const;
};

/// Findings of the same id (and the same root) in one group; roots in the order of their
/// first occurrence, each followed by the groups of its consequences. Pointers into
/// `findings`, which must outlive the groups.
inline std::vector<FindingGroup> groupFindings(const std::vector<Finding>& findings);

/// How many findings the views list, in one wording everywhere: "1 finding", "3 findings",
/// and "1 finding (2 requests)" when a listed finding stands for several requests' onsets.
inline std::string findingCountText(const std::vector<Finding>& findings) {
  const size_t listed = groupFindings(findings).size();
  std::string out = std::to_string(listed) + (listed == 1 ? " finding" : " findings");
  if (findings.size() > listed) {
    std::vector<int64_t> requests;
    for (const Finding& f : findings)
      if (std::find(requests.begin(), requests.end(), f.request) == requests.end())
        requests.push_back(f.request);
    out += " (" + std::to_string(requests.size()) + " requests)";
  }
  return out;
}

inline std::string FindingGroup::onsets() const {
  auto at = [](const Finding& f) {
    return std::to_string(f.request) + " at step " + std::to_string(f.step);
  };
  if (members.size() == 1) return "request " + at(first());
  std::string out = std::to_string(members.size()) + " requests: ";
  for (size_t i = 0; i < members.size(); ++i) out += (i ? ", " : "") + at(*members[i]);
  return out;
}

inline std::vector<FindingGroup> groupFindings(const std::vector<Finding>& findings) {
  std::vector<FindingGroup> groups;  // in the order of first occurrence
  for (const Finding& f : findings) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const FindingGroup& g) {
      return g.id == f.id && g.causedBy == f.causedBy;
    });
    if (it == groups.end()) {
      groups.push_back(FindingGroup{f.id, f.causedBy, 0, {}});
      it = std::prev(groups.end());
    }
    it->members.push_back(&f);
  }
  auto rootPresent = [&](const FindingGroup& g) {
    return !g.causedBy.empty() && std::any_of(groups.begin(), groups.end(), [&](const FindingGroup& r) {
             return &r != &g && r.causedBy.empty() && r.id == g.causedBy;
           });
  };
  std::vector<FindingGroup> out;
  std::vector<bool> done(groups.size(), false);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (rootPresent(groups[i])) continue;
    out.push_back(groups[i]);
    done[i] = true;
    if (!groups[i].causedBy.empty()) continue;  // a consequence whose root is absent heads alone
    for (size_t j = 0; j < groups.size(); ++j)
      if (!done[j] && rootPresent(groups[j]) && groups[j].causedBy == groups[i].id) {
        out.push_back(groups[j]);
        out.back().depth = 1;
        done[j] = true;
      }
  }
  for (size_t i = 0; i < groups.size(); ++i)  // none is lost (a chain of consequences)
    if (!done[i]) out.push_back(groups[i]);
  return out;
}

}  // namespace kvscope
