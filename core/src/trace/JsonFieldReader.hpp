// Typed access to one JSON object of a trace document; every error names the file and the
// field's JSON path (e.g. "steps[2].positions" or "model.num_layers").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/Error.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope::detail {

class JsonFieldReader {
 public:
  JsonFieldReader(const nlohmann::json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return j_; }
  const std::string& file() const { return file_; }
  bool has(const char* k) const { return j_.is_object() && j_.contains(k) && !j_[k].is_null(); }
  std::string at(const char* k) const { return path_.empty() ? k : path_ + "." + k; }
  [[noreturn]] void fail(const char* k, const std::string& what) const { throw InputError(file_, at(k), what); }

  int64_t integer(const char* k) const {
    if (!has(k)) fail(k, "missing");
    return int64Of(j_[k], k);
  }
  int64_t integerOr(const char* k, int64_t d) const { return has(k) ? integer(k) : d; }
  /// An integer in [lo, hi]; errors say which range.
  int64_t integerIn(const char* k, int64_t lo, int64_t hi) const {
    const int64_t v = integer(k);
    if (v < lo || v > hi)
      fail(k, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "]");
    return v;
  }
  /// A non-negative integer up to 2^64 - 1 (counters, seeds, versions).
  uint64_t unsignedOr(const char* k, uint64_t d) const {
    if (!has(k)) return d;
    const auto v = jsonUint64(j_[k]);
    if (!v) fail(k, "expected an integer >= 0, found " + jsonPreview(j_[k]));
    return *v;
  }
  std::string string(const char* k, const std::string& d = "") const {
    if (!has(k)) return d;
    if (!j_[k].is_string()) fail(k, "expected a string");
    return j_[k].get<std::string>();
  }
  std::vector<int64_t> ints(const char* k, bool required = true) const {
    if (!has(k)) {
      if (required) fail(k, "missing");
      return {};
    }
    return intArray(j_[k], k);
  }
  std::vector<std::string> strings(const char* k) const {
    if (!has(k)) return {};
    return stringArray(j_[k], k);
  }
  const nlohmann::json& child(const char* k) const {
    if (!has(k)) fail(k, "missing");
    return j_[k];
  }

  /// `v` as an array of integers; errors name field `k` under this object.
  std::vector<int64_t> intArray(const nlohmann::json& v, const char* k) const {
    if (!v.is_array()) fail(k, "expected an array of integers");
    std::vector<int64_t> out;
    out.reserve(v.size());
    for (const auto& x : v) out.push_back(int64Of(x, k, "expected integers, found "));
    return out;
  }
  int64_t int64Of(const nlohmann::json& v, const char* k,
                  const char* what = "expected an integer, found ") const {
    if (!v.is_number_integer()) fail(k, what + jsonPreview(v));
    const auto i = jsonInt64(v);
    if (!i) fail(k, "integer " + v.dump() + " is out of range");
    return *i;
  }
  std::vector<std::string> stringArray(const nlohmann::json& v, const char* k) const {
    if (!v.is_array()) fail(k, "expected an array of strings");
    std::vector<std::string> out;
    for (const auto& x : v) {
      if (!x.is_string()) fail(k, "expected strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }

 private:
  const nlohmann::json& j_;
  std::string file_;
  std::string path_;
};

}  // namespace kvscope::detail
