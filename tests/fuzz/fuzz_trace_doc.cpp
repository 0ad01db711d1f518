// The trace document (metadata "kvtrace") alone, in a valid container: byte 0 picks the
// tensors of a version 1 or a version 2 trace (written once from KVSCOPE_FUZZ_TEMPLATES or
// the corpus seeds), the rest is the JSON text. Mutations reach the step and tensor checks
// instead of dying in the safetensors header.
#include <cstring>

#include "FuzzSupport.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;

namespace {

struct Template {
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::tuple<std::string, SafetensorsDtype, std::vector<int64_t>, std::vector<uint8_t>>>
      tensors;
};

Template load(const std::string& path) {
  Template t;
  auto f = SafetensorsFile::open(path);
  for (const auto& [k, v] : f->metadata())
    if (k != "kvtrace") t.metadata.emplace_back(k, v);
  for (const auto& n : f->names()) {
    const auto& e = f->entry(n);
    t.tensors.emplace_back(n, e.dtype, e.shape,
                           std::vector<uint8_t>(f->bytes(e), f->bytes(e) + (e.end - e.begin)));
  }
  return t;
}

const Template& templ(int version) {
  static const Template v1 = load(KVSCOPE_FUZZ_TEMPLATE_V1);
  static const Template v2 = load(KVSCOPE_FUZZ_TEMPLATE_V2);
  return version == 1 ? v1 : v2;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Template& t = templ(data[0] % 2 == 0 ? 1 : 2);
  SafetensorsWriter w;
  for (const auto& [k, v] : t.metadata) w.setMetadata(k, v);
  w.setMetadata("kvtrace", std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  for (const auto& [n, dtype, shape, bytes] : t.tensors) w.addRaw(n, dtype, shape, bytes);
  const auto path = fuzz::scratch() / "doc.kvtrace";
  // A document that is not UTF-8 cannot be stored in a safetensors header (the writer
  // refuses it); the reader would never see one.
  if (!fuzz::accepts([&] { w.write(path.string(), true); })) return 0;
  const std::string before = fuzz::readFile(path);
  fuzz::accepts([&] { (void)TraceFile::read(path.string()); });
  fuzz::expectUnchanged(path, reinterpret_cast<const uint8_t*>(before.data()), before.size());
  return 0;
}
