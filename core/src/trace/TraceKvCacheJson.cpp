#include "trace/TraceKvCacheJson.hpp"

#include <cmath>
#include <stdexcept>

#include "trace/JsonFieldReader.hpp"

namespace kvscope::detail {

using nlohmann::json;

json kvCacheToJson(const KvQuantization& q) {
  if (!q.quantized()) return nullptr;
  json j = {{"dtype", q.dtype}, {"scale", q.scale}};
  if (q.scale == "per_layer") {
    j["k_scales"] = q.keyScales;
    j["v_scales"] = q.valueScales;
  }
  return j;
}

KvQuantization kvCacheFromJson(const json& doc, const std::string& file, int64_t numLayers) {
  KvQuantization q;
  if (!doc.is_object() || !doc.contains("kv_cache") || doc["kv_cache"].is_null()) return q;
  const json& j = doc["kv_cache"];
  if (!j.is_object()) throw InputError(file, "kv_cache", "expected an object");
  JsonFieldReader r(j, file, "kv_cache");
  q.dtype = r.string("dtype");
  if (q.dtype.empty()) r.fail("dtype", "missing");
  bool known = false;
  std::string names;
  for (const auto& d : KvQuantization::dtypes()) {
    known = known || d == q.dtype;
    names += (names.empty() ? "" : ", ") + d;
  }
  if (!known) r.fail("dtype", "unknown cache dtype '" + q.dtype + "' (known: " + names + ")");
  q.scale = r.string("scale", q.blockwise() ? "per_block" : "per_token_head");
  for (const char* k : {"k_scales", "v_scales"}) {
    if (!r.has(k)) continue;
    const json& a = j[k];
    if (!a.is_array()) r.fail(k, "expected an array of numbers");
    auto& out = std::string(k) == "k_scales" ? q.keyScales : q.valueScales;
    if (static_cast<int64_t>(a.size()) > numLayers)
      r.fail(k, std::to_string(a.size()) + " scales for " + std::to_string(numLayers) + " layers");
    for (const auto& x : a) {
      if (!x.is_number()) r.fail(k, "expected numbers, found " + jsonPreview(x));
      out.push_back(x.get<double>());
    }
  }
  try {
    q.validate(numLayers);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    const char* field = what.rfind("k_scales", 0) == 0              ? "k_scales"
                        : what.rfind("v_scales", 0) == 0            ? "v_scales"
                        : what.find("scale '") != std::string::npos ? "scale"
                                                                    : "dtype";
    r.fail(field, what);
  }
  return q;
}

}  // namespace kvscope::detail
