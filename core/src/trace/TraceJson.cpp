#include "trace/TraceJson.hpp"

#include <cstdio>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

using nlohmann::json;

namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

class Reader {
 public:
  Reader(const json& j, std::string file, std::string path) : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  bool has(const char* k) const { return j_.is_object() && j_.contains(k) && !j_[k].is_null(); }
  std::string at(const char* k) const { return path_.empty() ? k : path_ + "." + k; }
  [[noreturn]] void fail(const char* k, const std::string& what) const { throw InputError(file_, at(k), what); }

  int64_t integer(const char* k) const {
    if (!has(k)) fail(k, "missing");
    if (!j_[k].is_number_integer()) fail(k, "expected an integer, found " + j_[k].dump());
    return j_[k].get<int64_t>();
  }
  int64_t integerOr(const char* k, int64_t d) const { return has(k) ? integer(k) : d; }
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
    if (!j_[k].is_array()) fail(k, "expected an array of integers");
    std::vector<int64_t> out;
    for (const auto& x : j_[k]) {
      if (!x.is_number_integer()) fail(k, "expected integers, found " + x.dump());
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  std::vector<std::string> strings(const char* k) const {
    std::vector<std::string> out;
    if (!has(k)) return out;
    if (!j_[k].is_array()) fail(k, "expected an array of strings");
    for (const auto& x : j_[k]) {
      if (!x.is_string()) fail(k, "expected strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  const json& child(const char* k) const {
    if (!has(k)) fail(k, "missing");
    return j_[k];
  }

 private:
  const json& j_;
  std::string file_;
  std::string path_;
};

uint64_t parseHex(const Reader& r, const char* k, const std::string& s) {
  if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    r.fail(k, "expected a 64-bit hex checksum, found '" + s + "'");
  return std::stoull(s, nullptr, 16);
}

}  // namespace

json traceToJson(const Trace& t) {
  json doc;
  doc["version"] = t.formatVersion;
  doc["engine"] = t.engine;
  doc["mode"] = t.mode;
  const auto& m = t.model;
  doc["model"] = {{"fingerprint", m.fingerprint}, {"architecture", m.architecture},
                  {"directory", m.directory}, {"num_layers", m.numLayers}, {"num_heads", m.numHeads},
                  {"num_kv_heads", m.numKvHeads}, {"head_dim", m.headDim}, {"vocab_size", m.vocabSize},
                  {"max_positions", m.maxPositions}, {"stored_dtype", m.storedDtype},
                  {"compute_dtype", m.computeDtype}};
  doc["requests"] = json::array();
  for (const auto& r : t.requests) {
    json p;
    to_json(p, r.policy);
    doc["requests"].push_back({{"id", r.id}, {"prompt_ids", r.promptIds}, {"prompt_text", r.promptText},
                               {"policy", p}, {"max_new_tokens", r.maxNewTokens}, {"eos_ids", r.eosIds},
                               {"generated", r.generated}, {"stop_reason", r.stopReason},
                               {"arrival_tick", r.arrivalTick}, {"batch_group", r.batchGroup}});
  }
  doc["steps"] = json::array();
  for (const auto& s : t.steps) {
    json j = {{"request", s.request}, {"step", s.step}, {"tick", s.tick}, {"slot", s.slot},
              {"fed_ids", s.fedIds}, {"positions", s.positions}, {"chosen", s.chosenToken},
              {"rng_draws_before", s.rngDrawsBefore}, {"rng_draws_after", s.rngDrawsAfter},
              {"weights_version", s.weightsVersion}, {"events", s.events}};
    if (!s.fedMask.empty()) j["fed_mask"] = s.fedMask;
    if (!s.layers.empty()) {
      json lengths = json::array(), ck = json::array(), cv = json::array();
      bool sums = true;
      for (const auto& l : s.layers) {
        lengths.push_back(l.cacheLength);
        sums = sums && l.keyChecksum && l.valueChecksum;
        if (l.keyChecksum && l.valueChecksum) {
          ck.push_back(hex64(*l.keyChecksum));
          cv.push_back(hex64(*l.valueChecksum));
        }
      }
      j["cache_lengths"] = lengths;
      if (sums) {
        j["checksums_k"] = ck;
        j["checksums_v"] = cv;
      }
    }
    doc["steps"].push_back(std::move(j));
  }
  doc["events"] = json::array();
  for (const auto& e : t.events)
    doc["events"].push_back({{"tick", e.tick}, {"kind", e.kind}, {"detail", e.detail},
                             {"weights_version", e.weightsVersion}, {"tensor", e.tensor},
                             {"scale", e.scale}, {"seed", e.seed}});
  doc["faults"] = t.faults;
  return doc;
}

Trace traceFromJson(const json& doc, const std::string& file) {
  if (!doc.is_object()) throw InputError(file, "kvtrace", "expected a JSON object");
  Reader top(doc, file, "");
  Trace t;
  t.formatVersion = static_cast<int>(top.integer("version"));
  if (t.formatVersion != 1)
    top.fail("version", "trace document version " + std::to_string(t.formatVersion) + " is not supported (expected 1)");
  t.engine = top.string("engine", "unknown");
  t.mode = top.string("mode", "cached");
  if (t.mode != "cached" && t.mode != "uncached") top.fail("mode", "expected \"cached\" or \"uncached\"");
  Reader m(top.child("model"), file, "model");
  t.model.fingerprint = m.string("fingerprint");
  t.model.architecture = m.string("architecture");
  t.model.directory = m.string("directory");
  t.model.numLayers = m.integer("num_layers");
  t.model.numHeads = m.integerOr("num_heads", 0);
  t.model.numKvHeads = m.integer("num_kv_heads");
  t.model.headDim = m.integer("head_dim");
  t.model.vocabSize = m.integer("vocab_size");
  t.model.maxPositions = m.integerOr("max_positions", 0);
  t.model.storedDtype = m.string("stored_dtype");
  t.model.computeDtype = m.string("compute_dtype", "float32");
  if (t.model.numLayers <= 0 || t.model.numKvHeads <= 0 || t.model.headDim <= 0 || t.model.vocabSize <= 0)
    throw InputError(file, "model", "num_layers, num_kv_heads, head_dim and vocab_size must be positive");
  const json& reqs = top.child("requests");
  if (!reqs.is_array()) top.fail("requests", "expected an array");
  for (size_t i = 0; i < reqs.size(); ++i) {
    Reader r(reqs[i], file, "requests[" + std::to_string(i) + "]");
    TraceRequest tr;
    tr.id = r.integer("id");
    tr.promptIds = r.ints("prompt_ids");
    tr.promptText = r.string("prompt_text");
    if (r.has("policy")) {
      try {
        from_json(reqs[i]["policy"], tr.policy);
      } catch (const InputError& e) {
        throw InputError(file, r.at("policy") + "." + e.field(), e.detail());
      } catch (const std::exception& e) {
        throw InputError(file, r.at("policy"), e.what());
      }
    }
    tr.maxNewTokens = r.integerOr("max_new_tokens", 0);
    tr.eosIds = r.ints("eos_ids", false);
    tr.generated = r.ints("generated");
    tr.stopReason = r.string("stop_reason", "unknown");
    tr.arrivalTick = r.integerOr("arrival_tick", 0);
    tr.batchGroup = r.integerOr("batch_group", -1);
    for (int64_t id : tr.promptIds)
      if (id < 0 || id >= t.model.vocabSize) r.fail("prompt_ids", "token id " + std::to_string(id) + " is outside the vocabulary");
    t.requests.push_back(std::move(tr));
  }
  const json& steps = top.child("steps");
  if (!steps.is_array()) top.fail("steps", "expected an array");
  for (size_t i = 0; i < steps.size(); ++i) {
    Reader s(steps[i], file, "steps[" + std::to_string(i) + "]");
    TraceStep st;
    st.request = s.integer("request");
    if (!t.findRequest(st.request)) s.fail("request", "names request " + std::to_string(st.request) + " which is not in requests");
    st.step = s.integer("step");
    st.tick = s.integerOr("tick", static_cast<int64_t>(i));
    st.slot = s.integerOr("slot", st.request);
    st.fedIds = s.ints("fed_ids");
    st.positions = s.ints("positions");
    if (st.positions.size() != st.fedIds.size())
      s.fail("positions", std::to_string(st.positions.size()) + " positions for " + std::to_string(st.fedIds.size()) + " fed tokens");
    for (int64_t m : s.ints("fed_mask", false)) st.fedMask.push_back(m ? 1 : 0);
    if (!st.fedMask.empty() && st.fedMask.size() != st.fedIds.size()) s.fail("fed_mask", "one entry per fed token expected");
    st.chosenToken = s.integerOr("chosen", -1);
    st.rngDrawsBefore = static_cast<uint64_t>(s.integerOr("rng_draws_before", 0));
    st.rngDrawsAfter = static_cast<uint64_t>(s.integerOr("rng_draws_after", 0));
    st.weightsVersion = static_cast<uint64_t>(s.integerOr("weights_version", 0));
    st.events = s.strings("events");
    auto lengths = s.ints("cache_lengths", false);
    if (!lengths.empty() && static_cast<int64_t>(lengths.size()) != t.model.numLayers)
      s.fail("cache_lengths", "one entry per layer expected (" + std::to_string(t.model.numLayers) + ")");
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
    t.steps.push_back(std::move(st));
  }
  if (top.has("events")) {
    const json& ev = doc["events"];
    for (size_t i = 0; i < ev.size(); ++i) {
      Reader e(ev[i], file, "events[" + std::to_string(i) + "]");
      TraceEvent te;
      te.tick = e.integerOr("tick", 0);
      te.kind = e.string("kind");
      te.detail = e.string("detail");
      te.weightsVersion = static_cast<uint64_t>(e.integerOr("weights_version", 0));
      te.tensor = e.string("tensor");
      if (e.has("scale")) te.scale = ev[i]["scale"].get<double>();
      te.seed = static_cast<uint64_t>(e.integerOr("seed", 0));
      t.events.push_back(std::move(te));
    }
  }
  t.faults = top.strings("faults");
  return t;
}

}  // namespace kvscope::detail
