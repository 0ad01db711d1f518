#include "kvscope/FailureMatrix.hpp"

#include <sstream>
#include <stdexcept>

#include "audit/rows/RowRegistry.hpp"

namespace kvscope {

const std::vector<FailureMatrixRow>& FailureMatrix::rows() {
  static const std::vector<FailureMatrixRow> table = [] {
    std::vector<FailureMatrixRow> out;
    for (const detail::FailureRow* r : detail::RowRegistry::listed()) {
      const detail::RowSpec& s = r->spec();
      out.push_back({s.id, s.observation, s.firstCheck, s.origin, s.citations, s.divergent});
    }
    return out;
  }();
  return table;
}

const FailureMatrixRow& FailureMatrix::row(const std::string& id) {
  for (const auto& r : rows())
    if (r.id == id) return r;
  throw std::out_of_range("unknown finding id '" + id + "'");
}

std::string FailureMatrix::markdown() {
  std::ostringstream os;
  os << "| finding id | origin | observation | first check |\n| --- | --- | --- | --- |\n";
  for (const auto& r : rows())
    os << "| `" << r.id << "` | " << (r.origin == MatrixOrigin::Method ? "method" : "KV Scope")
       << " | " << r.observation << " | " << r.firstCheck << " |\n";
  return os.str();
}

}  // namespace kvscope
