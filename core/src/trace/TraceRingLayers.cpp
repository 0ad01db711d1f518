#include "trace/TraceRingLayers.hpp"

#include <cstring>

#include "kvscope/Error.hpp"
#include "trace/JsonFieldReader.hpp"
#include "util/InputLimits.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope::detail {

using nlohmann::json;

namespace {
const char* const kRingTensor = "ring_positions";

std::string rowField(size_t step) { return "steps.ring_row[" + std::to_string(step) + "]"; }
}  // namespace

json layerKindsToJson(const std::vector<TraceLayerKind>& kinds) {
  if (kinds.empty()) return nullptr;
  json a = json::array();
  for (const auto& k : kinds) {
    if (k.recurrent || k.latent) {
      a.push_back({{"kind", k.recurrent ? "recurrent" : "latent"}});
      continue;
    }
    if (k.chunk > 0) {
      json j = {{"kind", "chunked"}, {"chunk", k.chunk}};
      if (k.ring()) j["ring_slots"] = k.ringSlots;
      a.push_back(std::move(j));
      continue;
    }
    if (k.window <= 0) {
      a.push_back({{"kind", "full"}});
      continue;
    }
    json j = {{"kind", "sliding"}, {"window", k.window}};
    if (k.ring()) j["ring_slots"] = k.ringSlots;
    a.push_back(std::move(j));
  }
  return a;
}

std::vector<TraceLayerKind> layerKindsFromJson(const json& doc, const std::string& file,
                                               int64_t numLayers) {
  JsonFieldReader top(doc, file, "");
  if (!top.has("layer_kinds")) return {};
  const json& a = doc["layer_kinds"];
  if (!a.is_array() || static_cast<int64_t>(a.size()) != numLayers)
    top.fail("layer_kinds", "expected an array of one object per model layer (model.num_layers " +
                                std::to_string(numLayers) + "), found " + jsonPreview(a));
  std::vector<TraceLayerKind> kinds;
  int64_t slots = 0, firstRing = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = "layer_kinds[" + std::to_string(i) + "]";
    if (!a[i].is_object())
      throw InputError(file, at, "expected an object, found " + jsonPreview(a[i]));
    JsonFieldReader e(a[i], file, at);
    const std::string kind = e.string("kind", "");
    TraceLayerKind k;
    if (kind == "sliding" || kind == "chunked") {  // the span they attend over, a ring maybe
      (kind == "sliding" ? k.window : k.chunk) =
          e.integerIn(kind == "sliding" ? "window" : "chunk", 1, limits::kPositions);
      if (e.has("ring_slots")) k.ringSlots = e.integerIn("ring_slots", 1, limits::kCacheLength);
    } else if (kind == "full") {
      if (e.has("ring_slots"))
        e.fail("ring_slots", "a full-attention layer keeps every entry and has no ring");
    } else if (kind == "recurrent") {  // a state (Gated DeltaNet), no K/V records
      for (const char* span : {"window", "chunk", "ring_slots"})
        if (e.has(span)) e.fail(span, "a recurrent layer keeps a state, not K/V entries: it has no " + std::string(span));
      k.recurrent = true;
    } else if (kind == "latent") {  // latent rows and roped key parts (MLA), every one attended
      for (const char* span : {"window", "chunk", "ring_slots"})
        if (e.has(span)) e.fail(span, "a latent layer attends over every latent row it holds: it has no " + std::string(span));
      k.latent = true;
    } else {
      e.fail("kind", "unknown layer kind '" + kind + "' (known: full, sliding, chunked, recurrent, latent)");
    }
    if (k.ring() && slots > 0 && k.ringSlots != slots)
      e.fail("ring_slots", std::to_string(k.ringSlots) + " slots, but layer " +
                               std::to_string(firstRing) + "'s ring has " + std::to_string(slots) +
                               ": every ring layer of a trace has the same slot count");
    if (k.ring() && slots == 0) {
      slots = k.ringSlots;
      firstRing = static_cast<int64_t>(i);
    }
    kinds.push_back(k);
  }
  return kinds;
}

void planRingRows(const Trace& trace, std::vector<StepLayout>& layouts) {
  const std::vector<int64_t> ring = trace.ringLayers();
  int64_t rows = 0;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const auto& layers = trace.steps[i].layers;
    size_t mapped = 0;
    for (int64_t l : ring) {
      const auto at = static_cast<size_t>(l);
      if (at >= layers.size() || layers[at].ringPositions.empty()) continue;
      if (static_cast<int64_t>(layers[at].ringPositions.size()) != trace.layerKind(l).ringSlots)
        throw UsageError("trace steps[" + std::to_string(i) + "]: layer " + std::to_string(l) +
                         "'s ring map has " + std::to_string(layers[at].ringPositions.size()) +
                         " entries for " + std::to_string(trace.layerKind(l).ringSlots) + " slots");
      ++mapped;
    }
    if (mapped > 0 && mapped != ring.size())
      throw UsageError("trace steps[" + std::to_string(i) + "]: ring maps for " +
                       std::to_string(mapped) + " of the " + std::to_string(ring.size()) +
                       " ring layers (a step maps every ring layer or none)");
    layouts[i].ringRow = mapped > 0 ? rows++ : -1;
  }
}

void addRingPositions(const Trace& trace, const std::vector<StepLayout>& layouts,
                      SafetensorsWriter& w) {
  const std::vector<int64_t> ring = trace.ringLayers();
  int64_t rows = 0;
  for (const auto& at : layouts) rows += at.ringRow >= 0 ? 1 : 0;
  if (rows == 0 || ring.empty()) return;
  const int64_t S = trace.layerKind(ring.front()).ringSlots;
  const auto Lr = static_cast<int64_t>(ring.size());
  std::vector<int32_t> data(static_cast<size_t>(rows * Lr * S), -1);
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (layouts[i].ringRow < 0) continue;
    for (int64_t j = 0; j < Lr; ++j) {
      const auto& map =
          trace.steps[i].layers[static_cast<size_t>(ring[static_cast<size_t>(j)])].ringPositions;
      for (int64_t s = 0; s < S; ++s)
        data[static_cast<size_t>((layouts[i].ringRow * Lr + j) * S + s)] =
            static_cast<int32_t>(map[static_cast<size_t>(s)]);
    }
  }
  std::vector<uint8_t> bytes(data.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), data.data(), bytes.size());
  w.addRaw(kRingTensor, SafetensorsDtype::I32, {rows, Lr, S}, std::move(bytes));
}

void applyRingPositions(const SafetensorsFile& file, const std::vector<StepLayout>& layouts,
                        Trace& trace) {
  const std::vector<int64_t> ring = trace.ringLayers();
  const bool present = file.contains(kRingTensor);
  if (present && ring.empty())
    throw InputError(file.path(), kRingTensor,
                     "the trace has slot maps but layer_kinds declares no ring layer");
  int64_t rows = 0, S = 0;
  const auto Lr = static_cast<int64_t>(ring.size());
  if (present) {
    const auto& e = file.entry(kRingTensor);
    S = trace.layerKind(ring.front()).ringSlots;
    if (e.dtype != SafetensorsDtype::I32 || e.shape.size() != 3 || e.shape[1] != Lr ||
        e.shape[2] != S)
      throw InputError(file.path(), kRingTensor,
                       safetensorsDtypeName(e.dtype) + " " + shapeString(e.shape) +
                           " but an I32 [rows, " + std::to_string(Lr) + ", " + std::to_string(S) +
                           "] tensor is expected (ring layers, ring_slots)");
    rows = e.shape[0];
  }
  std::vector<int64_t> data;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const int64_t r = layouts[i].ringRow;
    if (r < 0) continue;
    if (!present)
      throw InputError(file.path(), kRingTensor,
                       "missing, but " + rowField(i) + " names row " + std::to_string(r) +
                           " (truncated trace?)");
    if (r >= rows)
      throw InputError(
          file.path(), rowField(i),
          "row " + std::to_string(r) + " but ring_positions has " + std::to_string(rows) + " rows");
    if (data.empty()) data = file.readInt64(kRingTensor);
    auto& layers = trace.steps[i].layers;
    layers.resize(static_cast<size_t>(trace.model.numLayers));
    for (int64_t j = 0; j < Lr; ++j) {
      const auto first = data.begin() + (r * Lr + j) * S;
      for (auto it = first; it != first + S; ++it)
        if (*it < -1)
          throw InputError(file.path(), kRingTensor,
                           "row " + std::to_string(r) + " holds position " + std::to_string(*it) +
                               " (a position id >= 0, or -1 for an empty slot)");
      layers[static_cast<size_t>(ring[static_cast<size_t>(j)])].ringPositions.assign(first,
                                                                                     first + S);
    }
  }
}

}  // namespace kvscope::detail
