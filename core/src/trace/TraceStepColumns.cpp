#include "trace/TraceStepColumns.hpp"

#include "kvscope/Error.hpp"
#include "util/InputLimits.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope::detail {

using nlohmann::json;

namespace {

json optionalCounts(const std::vector<std::optional<int64_t>>& counts) {
  if (counts.empty()) return nullptr;
  json a = json::array();
  for (const auto& n : counts) a.push_back(n ? json(*n) : json(nullptr));
  return a;
}

// Typed, validated access to the columns of the "steps" object.
class Columns {
 public:
  Columns(const json& j, std::string file) : j_(j), file_(std::move(file)) {
    if (!j_.is_object()) throw InputError(file_, "steps", "expected an object of columns (format version 2)");
    const auto count = j_.contains("count") ? jsonInt64(j_["count"]) : std::nullopt;
    if (!count || *count < 0)
      throw InputError(file_, "steps.count", "expected the number of steps (an integer >= 0)");
    n_ = static_cast<size_t>(*count);
  }
  size_t count() const { return n_; }

  /// The column, or nullptr when absent (an error when `required`).
  const json* column(const char* name, bool required) const {
    if (!j_.contains(name) || j_[name].is_null()) {
      if (required) throw InputError(file_, std::string("steps.") + name, "missing");
      return nullptr;
    }
    const json& c = j_[name];
    if (!c.is_array() || c.size() != n_)
      throw InputError(file_, std::string("steps.") + name,
                       "expected an array of steps.count (" + std::to_string(n_) + ") entries, found " +
                           (c.is_array() ? std::to_string(c.size()) + " entries" : std::string(c.type_name())));
    return &c;
  }
  [[noreturn]] void fail(const char* name, size_t i, const std::string& what) const {
    throw InputError(file_, std::string("steps.") + name + "[" + std::to_string(i) + "]", what);
  }
  int64_t integer(const json* c, const char* name, size_t i, int64_t fallback) const {
    if (!c) return fallback;
    return int64Of((*c)[i], name, i, "expected an integer, found ");
  }
  /// An integer in [lo, hi].
  int64_t integerIn(const json* c, const char* name, size_t i, int64_t fallback, int64_t lo,
                    int64_t hi) const {
    const int64_t v = integer(c, name, i, fallback);
    if (c && (v < lo || v > hi))
      fail(name, i,
           std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "]");
    return v;
  }
  /// A non-negative integer up to 2^64 - 1.
  uint64_t count64(const json* c, const char* name, size_t i) const {
    if (!c) return 0;
    const auto v = jsonUint64((*c)[i]);
    if (!v) fail(name, i, "expected an integer >= 0, found " + jsonPreview((*c)[i]));
    return *v;
  }
  int64_t int64Of(const json& v, const char* name, size_t i, const char* what) const {
    if (!v.is_number_integer()) fail(name, i, what + jsonPreview(v));
    const auto n = jsonInt64(v);
    if (!n) fail(name, i, "integer " + v.dump() + " is out of range");
    return *n;
  }
  std::vector<int64_t> ints(const json* c, const char* name, size_t i) const {
    const json& v = (*c)[i];
    if (!v.is_array()) fail(name, i, "expected an array of integers, found " + jsonPreview(v));
    std::vector<int64_t> out;
    out.reserve(v.size());
    for (const auto& x : v) out.push_back(int64Of(x, name, i, "expected integers, found "));
    return out;
  }
  /// null -> empty; otherwise exactly `layers` entries, each a count >= 0 or null.
  std::vector<std::optional<int64_t>> counts(const json* c, const char* name, size_t i, int64_t layers) const {
    if (!c || (*c)[i].is_null()) return {};
    const json& v = (*c)[i];
    if (!v.is_array() || static_cast<int64_t>(v.size()) != layers)
      fail(name, i,
           "expected null or one entry per layer (" + std::to_string(layers) + "), found " +
               jsonPreview(v));
    std::vector<std::optional<int64_t>> out;
    for (const auto& x : v) {
      if (x.is_null()) {
        out.emplace_back();
      } else if (const auto n = jsonInt64(x); n && *n >= 0 && *n <= limits::kCacheLength) {
        out.emplace_back(*n);
      } else {
        fail(name, i,
             "expected counts in [0, " + std::to_string(limits::kCacheLength) +
                 "] or null, found " + jsonPreview(x));
      }
    }
    return out;
  }

 private:
  const json& j_;
  std::string file_;
  size_t n_ = 0;
};

}  // namespace

json stepsToColumns(const Trace& trace, const std::vector<StepLayout>& layouts) {
  json c = json::object();
  c["count"] = trace.steps.size();
  for (const char* k : {"request", "step", "tick", "slot", "fed_ids", "positions", "chosen", "rng_draws_before",
                        "rng_draws_after", "weights_version", "events", "logits_row", "cache_lengths"})
    c[k] = json::array();
  bool masks = false, appended = false, snapshots = false, checksums = false, drafts = false,
       rings = false, reused = false, experts = false, states = false;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& s = trace.steps[i];
    const StepLayout& at = layouts[i];
    c["request"].push_back(s.request);
    c["step"].push_back(s.step);
    c["tick"].push_back(s.tick);
    c["slot"].push_back(s.slot);
    c["fed_ids"].push_back(s.fedIds);
    c["positions"].push_back(s.positions);
    c["chosen"].push_back(s.chosenToken);
    c["rng_draws_before"].push_back(s.rngDrawsBefore);
    c["rng_draws_after"].push_back(s.rngDrawsAfter);
    c["weights_version"].push_back(s.weightsVersion);
    c["events"].push_back(s.events);
    c["logits_row"].push_back(at.logitsRow);
    json lengths = nullptr;
    if (!s.layers.empty()) {
      lengths = json::array();
      if (!trace.isLayerSubset())
        for (const auto& l : s.layers) lengths.push_back(l.cacheLength);
      for (int64_t l : trace.recordedLayers)
        lengths.push_back(static_cast<size_t>(l) < s.layers.size()
                              ? s.layers[static_cast<size_t>(l)].cacheLength
                              : int64_t{0});
    }
    c["cache_lengths"].push_back(std::move(lengths));
    masks = masks || !s.fedMask.empty();
    drafts = drafts || s.draftCount > 0;
    reused = reused || s.reusedCount > 0;
    appended = appended || !at.appended.empty();
    snapshots = snapshots || !at.snapshot.empty();
    checksums = checksums || at.checksumRow >= 0;
    rings = rings || at.ringRow >= 0;
    experts = experts || at.expertRow >= 0;
    states = states || at.stateRow >= 0;
  }
  if (masks) {
    c["fed_mask"] = json::array();
    for (const auto& s : trace.steps) c["fed_mask"].push_back(s.fedMask.empty() ? json(nullptr) : json(s.fedMask));
  }
  if (drafts) {  // speculative decoding; written only when a step verified drafts
    c["draft_count"] = json::array();
    c["accepted_count"] = json::array();
    for (const auto& s : trace.steps) {
      c["draft_count"].push_back(s.draftCount);
      c["accepted_count"].push_back(s.acceptedCount);
    }
  }
  if (reused) {  // prefix-cache hits; written only when a step reused entries
    c["reused_count"] = json::array();
    c["reused_from"] = json::array();
    c["reused_blocks"] = json::array();
    for (const auto& s : trace.steps) {
      c["reused_count"].push_back(s.reusedCount);
      c["reused_from"].push_back(s.reusedFrom);
      c["reused_blocks"].push_back(s.reusedBlocks.empty() ? json(nullptr) : json(s.reusedBlocks));
    }
  }
  if (appended) {
    c["appended"] = json::array();
    for (const auto& at : layouts) c["appended"].push_back(optionalCounts(at.appended));
  }
  if (snapshots) {
    c["snapshot_lengths"] = json::array();
    for (const auto& at : layouts) c["snapshot_lengths"].push_back(optionalCounts(at.snapshot));
  }
  if (checksums) {
    c["checksum_row"] = json::array();
    for (const auto& at : layouts) c["checksum_row"].push_back(at.checksumRow);
  }
  if (rings) {  // ring caches' slot maps; written only when a step recorded them
    c["ring_row"] = json::array();
    for (const auto& at : layouts) c["ring_row"].push_back(at.ringRow);
  }
  if (experts) {  // a mixture of experts' routing; written only when a step recorded it
    c["expert_row"] = json::array();
    for (const auto& at : layouts) c["expert_row"].push_back(at.expertRow);
  }
  if (states) {  // recurrent layers' states; written only when a step recorded them
    c["state_row"] = json::array();
    for (const auto& at : layouts) c["state_row"].push_back(at.stateRow);
  }
  return c;
}

std::vector<StepLayout> stepsFromColumns(const json& steps, const std::string& file, Trace& trace) {
  const Columns cols(steps, file);
  // Per-layer entries stand for the trace's layers (recorded_layers, else all), in order.
  const std::vector<int64_t> recorded = trace.layerIndices();
  const auto L = static_cast<int64_t>(recorded.size());
  const json* request = cols.column("request", true);
  const json* step = cols.column("step", true);
  const json* fed = cols.column("fed_ids", true);
  const json* positions = cols.column("positions", true);
  const json* tick = cols.column("tick", false);
  const json* slot = cols.column("slot", false);
  const json* mask = cols.column("fed_mask", false);
  const json* chosen = cols.column("chosen", false);
  const json* drawsBefore = cols.column("rng_draws_before", false);
  const json* drawsAfter = cols.column("rng_draws_after", false);
  const json* version = cols.column("weights_version", false);
  const json* events = cols.column("events", false);
  const json* logitsRow = cols.column("logits_row", false);
  const json* appended = cols.column("appended", false);
  const json* snapshot = cols.column("snapshot_lengths", false);
  const json* lengths = cols.column("cache_lengths", false);
  const json* checksumRow = cols.column("checksum_row", false);
  const json* ringRow = cols.column("ring_row", false);
  const json* expertRow = cols.column("expert_row", false);
  const json* stateRow = cols.column("state_row", false);
  const json* draftCount = cols.column("draft_count", false);
  const json* acceptedCount = cols.column("accepted_count", false);
  const json* reusedCount = cols.column("reused_count", false);
  const json* reusedFrom = cols.column("reused_from", false);
  const json* reusedBlocks = cols.column("reused_blocks", false);

  std::vector<StepLayout> layouts(cols.count());
  trace.steps.resize(cols.count());
  for (size_t i = 0; i < cols.count(); ++i) {
    TraceStep& st = trace.steps[i];
    st.request = cols.integer(request, "request", i, 0);
    if (!trace.findRequest(st.request))
      cols.fail("request", i, "names request " + std::to_string(st.request) + " which is not in requests");
    st.step = cols.integer(step, "step", i, 0);
    st.tick = cols.integer(tick, "tick", i, static_cast<int64_t>(i));
    st.slot = cols.integer(slot, "slot", i, st.request);
    st.fedIds = cols.ints(fed, "fed_ids", i);
    for (int64_t id : st.fedIds)
      if (id < 0 || id >= trace.model.vocabSize)
        cols.fail("fed_ids", i,
                  "token id " + std::to_string(id) +
                      " is outside the vocabulary (model.vocab_size " +
                      std::to_string(trace.model.vocabSize) + ")");
    st.positions = cols.ints(positions, "positions", i);
    if (st.positions.size() != st.fedIds.size())
      cols.fail("positions", i,
                std::to_string(st.positions.size()) + " positions for " + std::to_string(st.fedIds.size()) + " fed tokens");
    if (mask && !(*mask)[i].is_null()) {
      for (int64_t m : cols.ints(mask, "fed_mask", i)) st.fedMask.push_back(m ? 1 : 0);
      if (st.fedMask.size() != st.fedIds.size()) cols.fail("fed_mask", i, "one entry per fed token expected");
    }
    // Speculative decoding: the last draft_count fed entries are drafts, accepted_count of
    // them (a prefix) accepted.
    st.draftCount =
        cols.integerIn(draftCount, "draft_count", i, 0, 0, static_cast<int64_t>(st.fedIds.size()));
    st.acceptedCount = cols.integerIn(acceptedCount, "accepted_count", i, 0, 0, st.draftCount);
    // Prefix caching: entries taken from the prefix cache, from a known request or -1.
    st.reusedCount = cols.integerIn(reusedCount, "reused_count", i, 0, 0, limits::kCacheLength);
    st.reusedFrom = cols.integer(reusedFrom, "reused_from", i, -1);
    if (st.reusedFrom < -1 || (st.reusedFrom >= 0 && !trace.findRequest(st.reusedFrom)))
      cols.fail("reused_from", i,
                "names request " + std::to_string(st.reusedFrom) +
                    " which is not in requests (-1: unknown)");
    if (reusedBlocks && !(*reusedBlocks)[i].is_null())
      st.reusedBlocks = cols.ints(reusedBlocks, "reused_blocks", i);
    // -1: no token chosen; otherwise a row index of the step's logits.
    st.chosenToken = cols.integerIn(chosen, "chosen", i, -1, -1, trace.model.vocabSize - 1);
    st.rngDrawsBefore = cols.count64(drawsBefore, "rng_draws_before", i);
    st.rngDrawsAfter = cols.count64(drawsAfter, "rng_draws_after", i);
    st.weightsVersion = cols.count64(version, "weights_version", i);
    if (events) {
      const json& e = (*events)[i];
      if (!e.is_array())
        cols.fail("events", i, "expected an array of strings, found " + jsonPreview(e));
      for (const auto& x : e) {
        if (!x.is_string()) cols.fail("events", i, "expected strings, found " + jsonPreview(x));
        st.events.push_back(x.get<std::string>());
      }
    }
    StepLayout& at = layouts[i];
    at.logitsRow = cols.integer(logitsRow, "logits_row", i, -1);
    if (at.logitsRow < -1) cols.fail("logits_row", i, "expected a row index or -1");
    at.checksumRow = cols.integer(checksumRow, "checksum_row", i, -1);
    if (at.checksumRow < -1) cols.fail("checksum_row", i, "expected a row index or -1");
    at.ringRow = cols.integer(ringRow, "ring_row", i, -1);
    if (at.ringRow < -1) cols.fail("ring_row", i, "expected a row index or -1");
    at.expertRow = cols.integer(expertRow, "expert_row", i, -1);
    if (at.expertRow < -1) cols.fail("expert_row", i, "expected a row index or -1");
    at.stateRow = cols.integer(stateRow, "state_row", i, -1);
    if (at.stateRow < -1) cols.fail("state_row", i, "expected a row index or -1");
    at.appended = cols.counts(appended, "appended", i, L);
    at.snapshot = cols.counts(snapshot, "snapshot_lengths", i, L);
    std::vector<int64_t> declared;
    if (lengths && !(*lengths)[i].is_null()) {
      declared = cols.ints(lengths, "cache_lengths", i);
      if (static_cast<int64_t>(declared.size()) != L)
        cols.fail("cache_lengths", i,
                  "one entry per layer expected (" + std::to_string(L) +
                      (trace.isLayerSubset() ? ": recorded_layers" : "") + ")");
      for (int64_t n : declared)
        if (n < 0 || n > limits::kCacheLength)
          cols.fail("cache_lengths", i,
                    "cache length " + std::to_string(n) + " is outside [0, " +
                        std::to_string(limits::kCacheLength) + "]");
    }
    if (!declared.empty() || at.checksumRow >= 0 || at.ringRow >= 0 || at.hasLayerData()) {
      st.layers.resize(static_cast<size_t>(trace.model.numLayers));  // indexed by model layer
      for (size_t j = 0; j < declared.size(); ++j)
        st.layers[static_cast<size_t>(recorded[j])].cacheLength = declared[j];
    }
  }
  return layouts;
}

}  // namespace kvscope::detail
