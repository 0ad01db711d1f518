#include "kvscope/TraceFile.hpp"

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "trace/JsonFieldReader.hpp"
#include "trace/PackedTraceTensors.hpp"
#include "trace/TraceJson.hpp"
#include "trace/TraceExpertChoices.hpp"
#include "trace/TracePacking.hpp"
#include "trace/TraceRecurrentStates.hpp"
#include "trace/TraceRingLayers.hpp"
#include "trace/TraceStepColumns.hpp"
#include "trace/TraceStepResolver.hpp"
#include "trace/TraceV1Reader.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

using nlohmann::json;

void TraceFile::write(const Trace& trace, const std::string& path, bool overwrite) {
  auto layouts = detail::planStepLayouts(trace);
  detail::planRingRows(trace, layouts);
  detail::planExpertRows(trace, layouts);
  detail::planStateRows(trace, layouts);
  json doc = detail::traceHeaderToJson(trace, kFormatVersion);
  doc["steps"] = detail::stepsToColumns(trace, layouts);
  SafetensorsWriter w;
  w.setMetadata("format", "kvtrace");
  w.setMetadata("kvtrace_version", std::to_string(kFormatVersion));
  w.setMetadata("kvtrace", doc.dump());
  detail::addPackedTensors(trace, layouts, w);
  detail::addRingPositions(trace, layouts, w);
  detail::addExpertChoices(trace, layouts, w);
  detail::addRecurrentStates(trace, layouts, w);
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
  const std::string version = ver == meta.end() ? std::string("(missing)") : ver->second;
  if (version != "1" && version != std::to_string(kFormatVersion))
    throw InputError(path, "__metadata__.kvtrace_version",
                     "trace format version " + version + " is not supported (this build reads versions 1 to " +
                         std::to_string(kFormatVersion) + ")");
  auto docIt = meta.find("kvtrace");
  if (docIt == meta.end()) throw InputError(path, "__metadata__.kvtrace", "missing trace document");
  const json doc = parseUntrustedJson(docIt->second, path, "__metadata__.kvtrace");
  // The storage dtype of the K/V tensors bounds how exactly two traces can agree.
  std::string tensorDtype = "F32";
  for (const auto& name : file->names())
    if (name.rfind("layer", 0) == 0) {
      const auto d = file->entry(name).dtype;
      if (d == SafetensorsDtype::F16 || d == SafetensorsDtype::BF16)
        tensorDtype = safetensorsDtypeName(d);
    }
  if (version == "1") {
    Trace v1 = detail::readTraceV1(doc, *file);
    v1.tensorDtype = tensorDtype;
    return v1;
  }
  Trace trace = detail::traceHeaderFromJson(doc, path, kFormatVersion);
  const auto layouts = detail::stepsFromColumns(detail::JsonFieldReader(doc, path, "").child("steps"), path, trace);
  const detail::PackedTraceTensors tensors(*file, trace.model, layouts, trace.layerIndices());
  tensors.applyChecksums(trace);
  detail::applyRingPositions(*file, layouts, trace);
  detail::applyExpertChoices(*file, layouts, trace);
  detail::resolveStepTensors(trace, tensors, path);
  detail::applyRecurrentStates(*file, layouts, trace);
  trace.tensorDtype = tensorDtype;
  return trace;
}

}  // namespace kvscope
