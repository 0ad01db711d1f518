// Findings as the audit builds them: a FindingDraft names each field it sets (request,
// step, layer, ...) and fills in its failure-matrix row; the FindingBuilder keeps the
// earliest occurrence of each id in each request (one finding per request that shows it)
// and counts the requests each id affects.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class FindingDraft {
 public:
  /// `id`: one of the kvscope::finding constants (FailureMatrix.hpp).
  explicit FindingDraft(const char* id);
  FindingDraft& request(int64_t v) {
    f_.request = v;
    return *this;
  }
  FindingDraft& step(int64_t v) {
    f_.step = v;
    return *this;
  }
  /// Engine clock of the step: orders findings of different requests (not reported).
  FindingDraft& tick(int64_t v) {
    tick_ = v;
    return *this;
  }
  /// The recorded step the finding is about: its request, step and tick.
  FindingDraft& at(const TraceStep& s) {
    f_.request = s.request;
    f_.step = s.step;
    tick_ = s.tick;
    return *this;
  }
  FindingDraft& layer(int64_t v) {
    f_.layer = v;
    return *this;
  }
  FindingDraft& position(int64_t v) {
    f_.position = v;
    return *this;
  }
  FindingDraft& confidence(double v) {
    f_.confidence = v;
    return *this;
  }
  FindingDraft& causedBy(const char* root) {
    f_.causedBy = root;
    return *this;
  }
  FindingDraft& explanation(std::string v) {
    f_.explanation = std::move(v);
    return *this;
  }
  FindingDraft& evidence(std::map<std::string, double> v) {
    f_.evidence = std::move(v);
    return *this;
  }
  /// The finding with its failure-matrix row and first check.
  Finding finish() const;
  int64_t tickValue() const { return tick_; }

 private:
  Finding f_;
  int64_t tick_ = 0;
};

class FindingBuilder {
 public:
  void add(const FindingDraft& draft);
  void addExisting(const Finding& f, int64_t tick);
  bool has(const std::string& id) const;
  bool hasFor(const std::string& id, int64_t request) const;
  /// Whether any finding so far satisfies `pred`.
  bool any(const std::function<bool(const Finding&)>& pred) const;
  /// Findings ordered by first occurrence (tick, request), each consequence right after the
  /// root of its own request; `requests_affected` counts the requests that show the id.
  std::vector<Finding> finish() const;

 private:
  struct Entry {
    Finding finding;
    int64_t tick;
  };
  std::vector<Entry> entries_;
};

}  // namespace kvscope::detail
