// The failure matrix's rows as modules (core/src/audit/rows/): one registry, one place per
// row. The matrix, the fault catalogue (--help) and docs/audit.md come from the same list.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "audit/rows/RowRegistry.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"

namespace kvscope {
namespace {

using detail::FailureRow;
using detail::RowRegistry;

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t indexOf(const std::vector<const FailureRow*>& rows, const std::string& id) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (id == rows[i]->id()) return i;
  return rows.size();
}

TEST(FailureRowRegistry, EveryRowOnceInTheWalkAndInTheMatrix) {
  const auto& walk = RowRegistry::rows();
  const auto& listed = RowRegistry::listed();
  ASSERT_EQ(walk.size(), listed.size());
  std::set<std::string> ids;
  for (const FailureRow* r : walk) EXPECT_TRUE(ids.insert(r->id()).second) << r->id() << " twice";
  const auto& matrix = FailureMatrix::rows();
  ASSERT_EQ(matrix.size(), walk.size());
  for (size_t i = 0; i < matrix.size(); ++i) {
    EXPECT_EQ(matrix[i].id, listed[i]->id());
    EXPECT_EQ(&RowRegistry::row(matrix[i].id), listed[i]);
    EXPECT_FALSE(matrix[i].observation.empty()) << matrix[i].id;
    EXPECT_FALSE(matrix[i].firstCheck.empty()) << matrix[i].id;
  }
  EXPECT_THROW(RowRegistry::row("no_such_row"), std::out_of_range);
}

// The method's eight rows, in its order, before KV Scope's.
TEST(FailureRowRegistry, TheMethodsRowsFirstInItsOrder) {
  const std::vector<std::string> method = {"position",   "wrong_layer", "duplicate_append",
                                           "cross_request", "tie_rule", "rng_order",
                                           "stale_cache", "context_limit"};
  const auto& matrix = FailureMatrix::rows();
  for (size_t i = 0; i < method.size(); ++i) {
    EXPECT_EQ(matrix[i].id, method[i]);
    EXPECT_EQ(matrix[i].origin, MatrixOrigin::Method) << matrix[i].id;
  }
  for (size_t i = method.size(); i < matrix.size(); ++i)
    EXPECT_EQ(matrix[i].origin, MatrixOrigin::KvScope) << matrix[i].id;
}

// A row that can cause another is asked before it, so the consequence finds its root.
TEST(FailureRowRegistry, RootsAreAskedBeforeTheirConsequences) {
  const auto& walk = RowRegistry::rows();
  int links = 0;
  for (size_t i = 0; i < walk.size(); ++i)
    for (const char* c : walk[i]->spec().causes) {
      const size_t at = indexOf(walk, c);
      ASSERT_LT(at, walk.size()) << walk[i]->id() << " causes unknown row " << c;
      EXPECT_LT(i, at) << walk[i]->id() << " is asked after its consequence " << c;
      ++links;
    }
  EXPECT_GE(links, 2);  // duplicate_append and speculative_rollback -> position
}

// --help's fault list is the rows' faults, in the matrix's order; every fault parses.
TEST(FailureRowRegistry, TheFaultCatalogueIsTheRowsFaults) {
  std::vector<std::string> fromRows;
  for (const FailureRow* r : RowRegistry::listed())
    for (const FaultInfo& f : r->spec().faults) fromRows.push_back(f.name);
  std::vector<std::string> catalogue;
  for (const FaultInfo& f : FaultSpec::catalog()) catalogue.push_back(f.name);
  EXPECT_EQ(catalogue, fromRows);
  EXPECT_GE(catalogue.size(), 18u);
  const std::string help = FaultSpec::helpText();
  for (const FaultInfo& f : FaultSpec::catalog()) {
    EXPECT_NE(help.find("  " + f.name + ": "), std::string::npos) << f.name;
    EXPECT_EQ(FaultSpec::parse(f.name).name, f.name);
  }
}

// docs/audit.md holds the matrix exactly as the registry lists it.
TEST(FailureRowRegistry, TheDocsHoldTheRegistrysMatrix) {
  const std::string doc = readFile(std::filesystem::path(KVSCOPE_SOURCE_DIR) / "docs/audit.md");
  const std::string begin = "<!-- failure-matrix: begin (FailureMatrix::markdown) -->\n";
  const std::string end = "<!-- failure-matrix: end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/audit.md has no failure-matrix block";
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), FailureMatrix::markdown())
      << "regenerate the block from FailureMatrix::markdown():\n"
      << FailureMatrix::markdown();
}

// No row-specific branch outside its module: a finding id constant is named only under
// core/src/audit/rows/ and by the two shared evidence searches, whose matches say which row
// they support. Everything else (the walk, the stages, the views) asks the registry.
TEST(FailureRowRegistry, NoFindingIdOutsideTheRowModules) {
  namespace fs = std::filesystem;
  const fs::path root(KVSCOPE_SOURCE_DIR);
  const std::set<std::string> shared = {"core/src/audit/SignatureSearch.cpp",
                                        "core/src/audit/RewriteOrigin.cpp"};
  int files = 0;
  for (const char* dir : {"core/src", "app", "ui"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      ++files;
      if (rel.rfind("core/src/audit/rows/", 0) == 0 || shared.count(rel)) continue;
      const std::string text = readFile(e.path());
      EXPECT_EQ(text.find("finding::"), std::string::npos) << rel << " names a row";
    }
  EXPECT_GT(files, 100);
}

}  // namespace
}  // namespace kvscope
