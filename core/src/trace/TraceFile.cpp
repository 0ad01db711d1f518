#include "kvscope/TraceFile.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "trace/TraceJson.hpp"

namespace kvscope {

using nlohmann::json;

namespace {
std::string stepKey(size_t i) { return "step" + std::to_string(i); }
std::string layerKey(size_t i, size_t l, const char* what) {
  return stepKey(i) + ".layer" + std::to_string(l) + "." + what;
}

// Columns [begin, end) of a [h, t, d] tensor.
FloatTensor columns(const FloatTensor& t, int64_t begin, int64_t end) {
  const int64_t h = t.shape[0], T = t.shape[1], d = t.shape[2], n = end - begin;
  FloatTensor out = FloatTensor::zeros({h, n, d});
  for (int64_t hh = 0; hh < h; ++hh)
    std::copy(t.data.begin() + (hh * T + begin) * d, t.data.begin() + (hh * T + end) * d,
              out.data.begin() + hh * n * d);
  return out;
}
}  // namespace

void TraceFile::write(const Trace& trace, const std::string& path, bool overwrite) {
  SafetensorsWriter w;
  json doc = detail::traceToJson(trace);
  w.setMetadata("format", "kvtrace");
  w.setMetadata("kvtrace_version", std::to_string(kFormatVersion));
  w.setMetadata("kvtrace", doc.dump());
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const auto& s = trace.steps[i];
    if (!s.logits.empty()) w.addFloat(stepKey(i) + ".logits", s.logits);
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const auto& rec = s.layers[l];
      if (!rec.keys.empty() || !rec.keys.shape.empty()) {
        w.addFloat(layerKey(i, l, "k"), rec.keys);
        w.addFloat(layerKey(i, l, "v"), rec.values);
      }
      if (!rec.snapshotKeys.empty()) {
        w.addFloat(layerKey(i, l, "cache_k"), rec.snapshotKeys);
        w.addFloat(layerKey(i, l, "cache_v"), rec.snapshotValues);
      }
    }
  }
  w.write(path, overwrite);
}

Trace TraceFile::read(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  const auto& meta = file->metadata();
  auto fmt = meta.find("format");
  if (fmt == meta.end() || fmt->second != "kvtrace")
    throw InputError(path, "__metadata__.format",
                     "not a KV Scope trace (expected \"kvtrace\"; see docs/trace-format.md)");
  auto ver = meta.find("kvtrace_version");
  if (ver == meta.end() || ver->second != std::to_string(kFormatVersion))
    throw InputError(path, "__metadata__.kvtrace_version",
                     "trace format version " + (ver == meta.end() ? std::string("(missing)") : ver->second) +
                         " is not supported (this build reads version " + std::to_string(kFormatVersion) + ")");
  auto docIt = meta.find("kvtrace");
  if (docIt == meta.end()) throw InputError(path, "__metadata__.kvtrace", "missing trace document");
  json doc;
  try {
    doc = json::parse(docIt->second);
  } catch (const json::exception& e) {
    throw InputError(path, "__metadata__.kvtrace", std::string("invalid JSON: ") + e.what());
  }
  Trace trace = detail::traceFromJson(doc, path);
  const auto& m = trace.model;
  std::map<int64_t, std::vector<int64_t>> lastLength;  // request -> per-layer length so far
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    TraceStep& s = trace.steps[i];
    const std::string where = "steps[" + std::to_string(i) + "]";
    if (file->contains(stepKey(i) + ".logits")) {
      s.logits = file->readFloat(stepKey(i) + ".logits");
      if (s.logits.shape.size() != 1 || s.logits.shape[0] != m.vocabSize)
        throw InputError(path, stepKey(i) + ".logits",
                         "shape " + s.logits.shapeString() + " but model.vocab_size is " + std::to_string(m.vocabSize));
    } else if (s.chosenToken >= 0) {
      throw InputError(path, stepKey(i) + ".logits", where + " chose a token but its logits row is missing (truncated trace?)");
    }
    const bool hasLayers = file->contains(layerKey(i, 0, "k")) || file->contains(layerKey(i, 0, "cache_k"));
    if (!hasLayers) continue;
    auto& prev = lastLength[s.request];
    if (prev.empty()) prev.assign(static_cast<size_t>(m.numLayers), 0);
    if (s.events.end() != std::find(s.events.begin(), s.events.end(), "cache_reset"))
      std::fill(prev.begin(), prev.end(), 0);
    const std::vector<int64_t> declared = s.layers.empty() ? std::vector<int64_t>() : [&] {
      std::vector<int64_t> v;
      for (const auto& l : s.layers) v.push_back(l.cacheLength);
      return v;
    }();
    s.layers.resize(static_cast<size_t>(m.numLayers));
    for (size_t l = 0; l < s.layers.size(); ++l) {
      auto& rec = s.layers[l];
      auto check = [&](const FloatTensor& t, const std::string& key) {
        if (t.shape.size() != 3 || t.shape[0] != m.numKvHeads || t.shape[2] != m.headDim)
          throw InputError(path, key,
                           "shape " + t.shapeString() + " but the model block says [" +
                               std::to_string(m.numKvHeads) + ", t, " + std::to_string(m.headDim) + "]");
      };
      if (file->contains(layerKey(i, l, "cache_k"))) {
        rec.snapshotKeys = file->readFloat(layerKey(i, l, "cache_k"));
        rec.snapshotValues = file->readFloat(layerKey(i, l, "cache_v"));
        check(rec.snapshotKeys, layerKey(i, l, "cache_k"));
        check(rec.snapshotValues, layerKey(i, l, "cache_v"));
      }
      if (file->contains(layerKey(i, l, "k"))) {
        rec.keys = file->readFloat(layerKey(i, l, "k"));
        rec.values = file->readFloat(layerKey(i, l, "v"));
        check(rec.keys, layerKey(i, l, "k"));
        check(rec.values, layerKey(i, l, "v"));
      } else if (!rec.snapshotKeys.empty()) {
        // Full-snapshot trace: the appended records are what is new since the last step.
        const int64_t t = rec.snapshotKeys.shape[1];
        const int64_t from = std::min(prev[l], t);
        rec.keys = columns(rec.snapshotKeys, from, t);
        rec.values = columns(rec.snapshotValues, from, t);
      } else {
        throw InputError(path, layerKey(i, l, "k"), "missing (truncated trace?)");
      }
      rec.cacheLength = l < declared.size() && declared[l] > 0
                            ? declared[l]
                            : (!rec.snapshotKeys.empty() ? rec.snapshotKeys.shape[1] : prev[l] + rec.keys.shape[1]);
      prev[l] = rec.cacheLength;
    }
  }
  return trace;
}

}  // namespace kvscope
