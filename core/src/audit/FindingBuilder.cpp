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
  for (auto& e : entries_) {
    if (e.finding.id != f.id) continue;
    if (std::find(e.requests.begin(), e.requests.end(), f.request) == e.requests.end()) e.requests.push_back(f.request);
    if (tick < e.tick || (tick == e.tick && f.request < e.finding.request)) {
      auto requests = e.requests;
      e = Entry{f, tick, requests};
    }
    return;
  }
  entries_.push_back(Entry{f, tick, {f.request}});
}

bool FindingBuilder::has(const std::string& id) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.finding.id == id; });
}

bool FindingBuilder::hasFor(const std::string& id, int64_t request) const {
  for (const auto& e : entries_)
    if (e.finding.id == id && std::find(e.requests.begin(), e.requests.end(), request) != e.requests.end()) return true;
  return false;
}

std::vector<Finding> FindingBuilder::finish() const {
  auto sorted = entries_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return a.tick < b.tick || (a.tick == b.tick && a.finding.request < b.finding.request);
  });
  // A consequence follows its root directly (caused_by names a finding that is present).
  auto rootPresent = [&](const Entry& e) {
    return !e.finding.causedBy.empty() &&
           std::any_of(sorted.begin(), sorted.end(),
                       [&](const Entry& r) { return r.finding.id == e.finding.causedBy; });
  };
  std::vector<Finding> out;
  auto emit = [&](const Entry& e) {
    Finding f = e.finding;
    f.evidence["requests_affected"] = static_cast<double>(e.requests.size());
    out.push_back(std::move(f));
  };
  for (const auto& e : sorted) {
    if (rootPresent(e)) continue;
    emit(e);
    for (const auto& c : sorted)
      if (rootPresent(c) && c.finding.causedBy == e.finding.id) emit(c);
  }
  return out;
}

}  // namespace kvscope::detail
