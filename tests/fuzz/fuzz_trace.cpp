// A whole trace file (version 1 or 2) as bytes: container, metadata and document together.
#include "FuzzSupport.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "input.kvtrace";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] { (void)TraceFile::read(path.string()); });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
