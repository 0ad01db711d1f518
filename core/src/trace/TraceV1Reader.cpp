#include "trace/TraceV1Reader.hpp"

#include "kvscope/Error.hpp"
#include "trace/JsonFieldReader.hpp"
#include "trace/TraceJson.hpp"
#include "trace/TraceStepResolver.hpp"
#include "util/InputLimits.hpp"

namespace kvscope::detail {

using nlohmann::json;

namespace {

std::string stepKey(size_t i) { return "step" + std::to_string(i); }
std::string layerKey(size_t i, size_t l, const char* what) {
  return stepKey(i) + ".layer" + std::to_string(l) + "." + what;
}

uint64_t parseHex(const JsonFieldReader& r, const char* k, const std::string& s) {
  if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    r.fail(k, "expected a 64-bit hex checksum, found '" + s + "'");
  return std::stoull(s, nullptr, 16);
}

// Version 1 tensors are named per step and layer.
class PerStepTensors : public TraceTensorSource {
 public:
  PerStepTensors(const SafetensorsFile& file, const TraceModelInfo& model) : file_(file), model_(model) {}

  std::optional<FloatTensor> logits(size_t i) const override {
    const auto key = stepKey(i) + ".logits";
    if (!file_.contains(key)) return std::nullopt;
    FloatTensor t = file_.readFloat(key);
    if (t.shape.size() != 1 || t.shape[0] != model_.vocabSize)
      throw InputError(file_.path(), key,
                       "shape " + t.shapeString() + " but model.vocab_size is " + std::to_string(model_.vocabSize));
    return t;
  }
  std::string logitsField(size_t i) const override { return stepKey(i) + ".logits"; }
  bool hasLayerData(size_t i) const override {
    return file_.contains(layerKey(i, 0, "k")) || file_.contains(layerKey(i, 0, "cache_k"));
  }
  std::optional<KeyValuePair> appended(size_t i, size_t l) const override { return pair(i, l, "k", "v"); }
  std::optional<KeyValuePair> snapshot(size_t i, size_t l) const override {
    return pair(i, l, "cache_k", "cache_v");
  }
  std::string recordsField(size_t i, size_t l) const override { return layerKey(i, l, "k"); }

 private:
  std::optional<KeyValuePair> pair(size_t i, size_t l, const char* k, const char* v) const {
    if (!file_.contains(layerKey(i, l, k))) return std::nullopt;
    // Keys and values are records of the same positions: their lengths must agree.
    const auto& ke = file_.entry(layerKey(i, l, k));
    const auto& ve = file_.entry(layerKey(i, l, v));
    checkRecordShape(file_.path(), ke.name, ke.shape, model_, false);
    checkRecordShape(file_.path(), ve.name, ve.shape, model_, true);
    if (ke.shape[1] != ve.shape[1])
      throw InputError(file_.path(), ve.name,
                       "shape " + shapeString(ve.shape) + " but " + ke.name + " is " +
                           shapeString(ke.shape) + " (keys and values must hold as many records)");
    return KeyValuePair{load(layerKey(i, l, k), false), load(layerKey(i, l, v), true)};
  }
  FloatTensor load(const std::string& key, bool values) const {
    checkRecordShape(file_.path(), key, file_.entry(key).shape, model_, values);
    return file_.readFloat(key);
  }
  const SafetensorsFile& file_;
  const TraceModelInfo& model_;
};

void checkTokenIds(const JsonFieldReader& s, const char* field, const std::vector<int64_t>& ids,
                   int64_t vocab) {
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      s.fail(field, "token id " + std::to_string(id) +
                        " is outside the vocabulary (model.vocab_size " + std::to_string(vocab) +
                        ")");
}

TraceStep stepFromJson(const json& j, size_t i, const Trace& t, const std::string& file) {
  JsonFieldReader s(j, file, "steps[" + std::to_string(i) + "]");
  TraceStep st;
  st.request = s.integer("request");
  if (!t.findRequest(st.request)) s.fail("request", "names request " + std::to_string(st.request) + " which is not in requests");
  st.step = s.integer("step");
  st.tick = s.integerOr("tick", static_cast<int64_t>(i));
  st.slot = s.integerOr("slot", st.request);
  st.fedIds = s.ints("fed_ids");
  checkTokenIds(s, "fed_ids", st.fedIds, t.model.vocabSize);
  st.positions = s.ints("positions");
  if (st.positions.size() != st.fedIds.size())
    s.fail("positions", std::to_string(st.positions.size()) + " positions for " + std::to_string(st.fedIds.size()) + " fed tokens");
  for (int64_t m : s.ints("fed_mask", false)) st.fedMask.push_back(m ? 1 : 0);
  if (!st.fedMask.empty() && st.fedMask.size() != st.fedIds.size()) s.fail("fed_mask", "one entry per fed token expected");
  st.chosenToken = s.has("chosen") ? s.integerIn("chosen", -1, t.model.vocabSize - 1) : -1;
  st.rngDrawsBefore = s.unsignedOr("rng_draws_before", 0);
  st.rngDrawsAfter = s.unsignedOr("rng_draws_after", 0);
  st.weightsVersion = s.unsignedOr("weights_version", 0);
  st.events = s.strings("events");
  auto lengths = s.ints("cache_lengths", false);
  if (!lengths.empty() && static_cast<int64_t>(lengths.size()) != t.model.numLayers)
    s.fail("cache_lengths", "one entry per layer expected (" + std::to_string(t.model.numLayers) + ")");
  for (int64_t n : lengths)
    if (n < 0 || n > limits::kCacheLength)
      s.fail("cache_lengths", "cache length " + std::to_string(n) + " is outside [0, " +
                                  std::to_string(limits::kCacheLength) + "]");
  auto ck = s.strings("checksums_k"), cv = s.strings("checksums_v");
  if ((!ck.empty() && ck.size() != lengths.size()) || ck.size() != cv.size())
    s.fail("checksums_k", "one checksum per layer for keys and values expected");
  for (size_t l = 0; l < lengths.size(); ++l) {
    TraceLayerRecord rec;
    rec.cacheLength = lengths[l];
    if (!ck.empty()) {
      rec.keyChecksum = parseHex(s, "checksums_k", ck[l]);
      rec.valueChecksum = parseHex(s, "checksums_v", cv[l]);
    }
    st.layers.push_back(std::move(rec));
  }
  return st;
}

}  // namespace

Trace readTraceV1(const json& doc, const SafetensorsFile& file) {
  Trace trace = traceHeaderFromJson(doc, file.path(), 1);
  if (trace.isLayerSubset())
    throw InputError(file.path(), "recorded_layers",
                     "a layer subset needs format version 2 (kvtrace_version \"2\")");
  const json& steps = JsonFieldReader(doc, file.path(), "").child("steps");
  if (!steps.is_array()) throw InputError(file.path(), "steps", "expected an array");
  for (size_t i = 0; i < steps.size(); ++i) trace.steps.push_back(stepFromJson(steps[i], i, trace, file.path()));
  resolveStepTensors(trace, PerStepTensors(file, trace.model), file.path());
  return trace;
}

}  // namespace kvscope::detail
