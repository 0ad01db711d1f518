// Shared helpers for the core tests: fixture paths and golden comparisons with a
// readable max-difference report.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/FloatTensor.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"

namespace kvscope::test {

/// A fresh (emptied) directory under one per-process root that is removed at exit.
inline std::filesystem::path freshDir(const std::string& name) {
  namespace fs = std::filesystem;
  static const struct Root {
    fs::path path = fs::temp_directory_path() / ("kvscope-test-" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } root;
  const fs::path d = root.path / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d;
}

inline std::string fixture(const std::string& rel) { return std::string(KVSCOPE_FIXTURES_DIR) + "/" + rel; }
/// tests/fixtures/hf/golden/<model>.json: prompts, ids, greedy continuations, batch.
inline nlohmann::json goldenJson(const std::string& model) {
  std::ifstream in(fixture("hf/golden/" + model + ".json"));
  return nlohmann::json::parse(in);
}
inline std::string hfModel(const std::string& name) { return fixture("hf/models/" + name); }

/// Compares a computed tensor to a golden one with a tolerance, reporting the worst element.
inline ::testing::AssertionResult closeTo(const FloatTensor& got, const FloatTensor& want, float tol) {
  if (got.shape != want.shape)
    return ::testing::AssertionFailure() << "shape " << got.shapeString() << " vs golden " << want.shapeString();
  float worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.data.size(); ++i) {
    float d = std::fabs(got.data[i] - want.data[i]);
    if (!(d <= worst)) { worst = d; at = i; }
  }
  if (worst <= tol) return ::testing::AssertionSuccess() << "max abs diff " << worst;
  return ::testing::AssertionFailure() << "max abs diff " << worst << " > " << tol << " at flat index " << at
                                       << " (got " << got.data[at] << ", golden " << want.data[at] << ")";
}

/// Copies the trace file `in` to `out` with its JSON document (metadata "kvtrace") passed
/// through `edit` and the tensors named in `drop` left out: damaged traces for error tests.
inline void rewriteTrace(const std::string& in, const std::string& out,
                         const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& drop = {}) {
  auto file = SafetensorsFile::open(in);
  nlohmann::json doc = nlohmann::json::parse(file->metadata().at("kvtrace"));
  if (edit) edit(doc);
  SafetensorsWriter w;
  for (const auto& [k, v] : file->metadata()) w.setMetadata(k, v);
  w.setMetadata("kvtrace", doc.dump());
  for (const auto& n : file->names()) {
    if (std::find(drop.begin(), drop.end(), n) != drop.end()) continue;
    const auto& e = file->entry(n);
    w.addRaw(n, e.dtype, e.shape, std::vector<uint8_t>(file->bytes(e), file->bytes(e) + (e.end - e.begin)));
  }
  w.write(out, true);
}

/// Rows [begin, begin+count) of a 2-D tensor.
inline FloatTensor rows(const FloatTensor& t, int64_t begin, int64_t count) {
  FloatTensor out;
  out.shape = {count, t.shape[1]};
  out.data.assign(t.data.begin() + begin * t.shape[1], t.data.begin() + (begin + count) * t.shape[1]);
  return out;
}

}  // namespace kvscope::test
