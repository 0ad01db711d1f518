// The safetensors container: header length, JSON header, dtypes, shapes, offsets, and
// reading every tensor it accepts.
#include "FuzzSupport.hpp"
#include "kvscope/SafetensorsFile.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "input.safetensors";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] {
    auto f = SafetensorsFile::open(path.string());
    for (const auto& name : f->names()) {
      const auto& e = f->entry(name);
      if (e.numel() > (1 << 20)) continue;
      if (e.dtype == SafetensorsDtype::F32 || e.dtype == SafetensorsDtype::F16 ||
          e.dtype == SafetensorsDtype::BF16)
        (void)f->readFloat(name);
      else if (e.dtype == SafetensorsDtype::U64)
        (void)f->readUint64(name);
    }
  });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
