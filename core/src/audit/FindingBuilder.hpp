// Collects findings, keeping the earliest occurrence of each id and counting the
// requests it affects.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kvscope/AuditReport.hpp"

namespace kvscope::detail {

class FindingBuilder {
 public:
  /// A finding with the failure-matrix row and first check filled in for `id`.
  static Finding make(const std::string& id, int64_t request, int64_t step, int64_t layer,
                      int64_t position, double confidence, std::string explanation,
                      std::map<std::string, double> evidence);
  /// Adds a finding (row text filled in from the failure matrix). `tick` orders findings.
  void add(const std::string& id, int64_t request, int64_t step, int64_t tick, int64_t layer,
           int64_t position, double confidence, std::string explanation,
           std::map<std::string, double> evidence);
  void addExisting(const Finding& f, int64_t tick);
  bool has(const std::string& id) const;
  bool hasFor(const std::string& id, int64_t request) const;
  /// Findings ordered by first occurrence (tick, request).
  std::vector<Finding> finish() const;

 private:
  struct Entry {
    Finding finding;
    int64_t tick;
    std::vector<int64_t> requests;
  };
  std::vector<Entry> entries_;
};

}  // namespace kvscope::detail
