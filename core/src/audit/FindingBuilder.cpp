#include "audit/FindingBuilder.hpp"

#include <algorithm>

#include "audit/rows/RowRegistry.hpp"

namespace kvscope::detail {

FindingDraft::FindingDraft(const char* id) { f_.id = id; }

Finding FindingDraft::finish() const {
  Finding f = f_;
  RowRegistry::row(f.id).describe(f);  // its matrix row and first check
  return f;
}

void FindingBuilder::add(const FindingDraft& draft) {
  addExisting(draft.finish(), draft.tickValue());
}

void FindingBuilder::addExisting(const Finding& f, int64_t tick) {
  // One finding per id and request: each request's onset of a bug is its own finding (its
  // step, layer and evidence), the earliest of that request kept.
  for (auto& e : entries_) {
    if (e.finding.id != f.id || e.finding.request != f.request) continue;
    if (tick < e.tick) e = Entry{f, tick};
    return;
  }
  entries_.push_back(Entry{f, tick});
}

bool FindingBuilder::has(const std::string& id) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.finding.id == id; });
}

bool FindingBuilder::hasFor(const std::string& id, int64_t request) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.finding.id == id && e.finding.request == request;
  });
}

bool FindingBuilder::any(const std::function<bool(const Finding&)>& pred) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return pred(e.finding); });
}

std::vector<Finding> FindingBuilder::finish() const {
  auto sorted = entries_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return a.tick < b.tick || (a.tick == b.tick && a.finding.request < b.finding.request);
  });
  // A consequence follows the root of its own request directly (caused_by names a finding
  // of that request that is present).
  auto isRootOf = [](const Entry& root, const Entry& c) {
    return !c.finding.causedBy.empty() && root.finding.id == c.finding.causedBy &&
           root.finding.request == c.finding.request;
  };
  auto rootPresent = [&](const Entry& e) {
    return std::any_of(sorted.begin(), sorted.end(), [&](const Entry& r) { return isRootOf(r, e); });
  };
  std::map<std::string, double> affected;  // id -> requests it holds for
  for (const auto& e : sorted) affected[e.finding.id] += 1.0;
  std::vector<Finding> out;
  auto emit = [&](const Entry& e) {
    Finding f = e.finding;
    f.evidence["requests_affected"] = affected[f.id];
    out.push_back(std::move(f));
  };
  for (const auto& e : sorted) {
    if (rootPresent(e)) continue;
    emit(e);
    for (const auto& c : sorted)
      if (isRootOf(e, c)) emit(c);
  }
  return out;
}

}  // namespace kvscope::detail
