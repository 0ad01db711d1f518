#include "kvscope/Trace.hpp"

#include <xxhash.h>

#include <algorithm>

namespace kvscope {

TraceModelInfo TraceModelInfo::ofConfig(const ModelConfig& c, bool latentHeads) {
  TraceModelInfo m;
  m.architecture = architectureName(c.architecture);
  m.numLayers = c.numLayers;
  m.numHeads = c.numHeads;
  m.numKvHeads = c.numKvHeads;
  m.headDim = c.headDim;
  if (c.cacheValueDim() != c.headDim) m.valueHeadDim = c.cacheValueDim();
  if (latentHeads && c.mla.enabled()) {  // each head's key (nope | roped part) and value
    m.latentHeads = true;
    m.numKvHeads = c.numHeads;
    m.headDim = c.mla.queryDim();
    m.valueHeadDim = c.mla.valueDim;
  }
  m.vocabSize = c.vocabSize;
  m.maxPositions = c.maxPositions;
  return m;
}

bool TraceModelInfo::operator==(const TraceModelInfo& o) const {
  return fingerprint == o.fingerprint && architecture == o.architecture &&
         directory == o.directory && numLayers == o.numLayers && numHeads == o.numHeads &&
         numKvHeads == o.numKvHeads && headDim == o.headDim && valueDim() == o.valueDim() && vocabSize == o.vocabSize &&
         maxPositions == o.maxPositions && storedDtype == o.storedDtype &&
         computeDtype == o.computeDtype && rope == o.rope && latentHeads == o.latentHeads;
}

bool TraceRequest::operator==(const TraceRequest& o) const {
  return id == o.id && promptIds == o.promptIds && promptText == o.promptText &&
         policy == o.policy && maxNewTokens == o.maxNewTokens && eosIds == o.eosIds &&
         generated == o.generated && stopReason == o.stopReason && arrivalTick == o.arrivalTick &&
         batchGroup == o.batchGroup;
}

bool TraceLayerRecord::operator==(const TraceLayerRecord& o) const {
  return cacheLength == o.cacheLength && keys == o.keys && values == o.values &&
         keyChecksum == o.keyChecksum && valueChecksum == o.valueChecksum &&
         snapshotKeys == o.snapshotKeys && snapshotValues == o.snapshotValues &&
         convState == o.convState && recurrentState == o.recurrentState &&
         ringPositions == o.ringPositions;
}

bool TraceStep::operator==(const TraceStep& o) const {
  return request == o.request && step == o.step && tick == o.tick && slot == o.slot &&
         fedIds == o.fedIds && positions == o.positions && fedMask == o.fedMask &&
         logits == o.logits && chosenToken == o.chosenToken && rngDrawsBefore == o.rngDrawsBefore &&
         rngDrawsAfter == o.rngDrawsAfter && weightsVersion == o.weightsVersion &&
         layers == o.layers && events == o.events && draftCount == o.draftCount &&
         acceptedCount == o.acceptedCount && reusedCount == o.reusedCount &&
         reusedFrom == o.reusedFrom && reusedBlocks == o.reusedBlocks && experts == o.experts;
}

bool TraceStep::resetsCache() const {
  return std::find(events.begin(), events.end(), "cache_reset") != events.end();
}

int64_t TraceStep::rejectedCount() const {
  return std::max<int64_t>(0, draftCount - acceptedCount);
}

int64_t TraceLayerRecord::keptRecords(int64_t lengthBefore, int64_t appended) const {
  const int64_t kept = cacheLength - lengthBefore;
  return kept >= 0 && kept < appended ? kept : appended;
}

bool TraceStep::isRealEntry(size_t i) const {
  if (static_cast<int64_t>(i) >= static_cast<int64_t>(fedIds.size()) - rejectedCount())
    return false;
  return fedMask.empty() || (i < fedMask.size() && fedMask[i] != 0);
}

int64_t TraceStep::realFedCount() const { return static_cast<int64_t>(realColumns().size()); }

std::vector<int64_t> TraceStep::realColumns(int64_t records) const {
  std::vector<int64_t> real;
  const bool masked = static_cast<size_t>(std::max<int64_t>(records, 0)) == fedMask.size();
  // Rejected drafts are the last fed entries; a layer that appended one record per fed entry
  // holds them last too.
  const int64_t rejectedFrom =
      records == static_cast<int64_t>(fedIds.size()) ? records - rejectedCount() : records;
  for (int64_t j = 0; j < records; ++j)
    if ((!masked || fedMask[static_cast<size_t>(j)]) && j < rejectedFrom) real.push_back(j);
  return real;
}

std::vector<int64_t> TraceStep::realColumns() const {
  return realColumns(static_cast<int64_t>(fedIds.size()));
}

std::vector<int64_t> TraceRequest::stream() const {
  std::vector<int64_t> s = promptIds;
  s.insert(s.end(), generated.begin(), generated.end());
  return s;
}

bool TraceEvent::operator==(const TraceEvent& o) const {
  return tick == o.tick && kind == o.kind && detail == o.detail &&
         weightsVersion == o.weightsVersion && tensor == o.tensor && scale == o.scale &&
         seed == o.seed;
}

bool Trace::operator==(const Trace& o) const {
  return formatVersion == o.formatVersion && engine == o.engine && mode == o.mode &&
         model == o.model && requests == o.requests && steps == o.steps && events == o.events &&
         faults == o.faults && faultFirings == o.faultFirings && recordedLayers == o.recordedLayers && kvCache == o.kvCache &&
         layerKinds == o.layerKinds;
}

const TraceRequest* Trace::findRequest(int64_t id) const {
  for (const auto& r : requests)
    if (r.id == id) return &r;
  return nullptr;
}

std::vector<int64_t> Trace::batchMatesOf(int64_t request) const {
  std::vector<int64_t> mates;
  const TraceRequest* r = findRequest(request);
  if (!r || r->batchGroup < 0) return mates;
  for (const auto& o : requests)
    if (o.id != request && o.batchGroup == r->batchGroup) mates.push_back(o.id);
  return mates;
}

std::vector<const TraceStep*> Trace::stepsOf(int64_t request) const {
  std::vector<const TraceStep*> out;
  for (const auto& s : steps)
    if (s.request == request) out.push_back(&s);
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceStep* a, const TraceStep* b) { return a->step < b->step; });
  return out;
}

std::vector<int64_t> Trace::streamHeldAfter(int64_t request) const {
  std::vector<int64_t> out;
  int64_t held = 0;
  for (const TraceStep* st : stepsOf(request)) {
    if (st->resetsCache()) held = 0;
    held += st->streamEntries();
    out.push_back(held);
  }
  return out;
}

bool Trace::hasSnapshots() const {
  for (const auto& s : steps)
    for (const auto& l : s.layers)
      if (!l.snapshotKeys.empty()) return true;
  return false;
}

bool Trace::hasLayer(int64_t layer) const {
  if (layer < 0 || layer >= model.numLayers) return false;
  return recordedLayers.empty() ||
         std::binary_search(recordedLayers.begin(), recordedLayers.end(), layer);
}

TraceLayerKind Trace::layerKind(int64_t layer) const {
  return layer >= 0 && layer < static_cast<int64_t>(layerKinds.size())
             ? layerKinds[static_cast<size_t>(layer)]
             : TraceLayerKind{};
}

std::vector<int64_t> Trace::recurrentLayers() const {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < static_cast<int64_t>(layerKinds.size()); ++l)
    if (layerKinds[static_cast<size_t>(l)].recurrent) out.push_back(l);
  return out;
}

std::vector<int64_t> Trace::ringLayers() const {
  std::vector<int64_t> out;
  for (int64_t l : layerIndices())
    if (layerKind(l).ring()) out.push_back(l);
  return out;
}

std::vector<int64_t> Trace::layerIndices() const {
  if (!recordedLayers.empty()) return recordedLayers;
  std::vector<int64_t> all(static_cast<size_t>(std::max<int64_t>(model.numLayers, 0)));
  for (size_t l = 0; l < all.size(); ++l) all[l] = static_cast<int64_t>(l);
  return all;
}

std::string layerNotInTraceNote(int64_t layer) {
  return "not checked: layer " + std::to_string(layer) + " not in the trace (minimized)";
}

std::string describeTraceLayers(const Trace& trace) {
  if (!trace.isLayerSubset()) return "all " + std::to_string(trace.model.numLayers) + " layers";
  std::string s = trace.recordedLayers.size() == 1 ? "layer " : "layers ";
  for (size_t i = 0; i < trace.recordedLayers.size(); ++i)
    s += (i ? ", " : "") + std::to_string(trace.recordedLayers[i]);
  return s + " of " + std::to_string(trace.model.numLayers);
}

std::ostream& operator<<(std::ostream& os, const TraceStep& s) {
  os << "step{request " << s.request << ", step " << s.step << ", tick " << s.tick << ", fed [";
  for (size_t i = 0; i < s.fedIds.size(); ++i) os << (i ? "," : "") << s.fedIds[i];
  os << "] at [";
  for (size_t i = 0; i < s.positions.size(); ++i) os << (i ? "," : "") << s.positions[i];
  os << "], chose " << s.chosenToken;
  if (s.draftCount > 0) os << ", drafts " << s.draftCount << " accepted " << s.acceptedCount;
  return os << ", weights v" << s.weightsVersion << "}";
}

uint64_t traceChecksum(const float* data, size_t count) {
  return XXH3_64bits(data, count * sizeof(float));
}

uint64_t traceRowChecksum(const std::vector<std::vector<float>>& heads) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& h : heads) XXH3_64bits_update(st, h.data(), h.size() * sizeof(float));
  const uint64_t out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return out;
}

}  // namespace kvscope
