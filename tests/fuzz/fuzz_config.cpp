// config.json + generation_config.json: the input is the two documents separated by a line
// "#####" (the second may be absent).
#include <cstring>

#include "FuzzSupport.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const std::string sep = "\n#####\n";
  const auto at = in.find(sep);
  const std::string config = in.substr(0, at);
  const auto dir = fuzz::scratch() / "config";
  std::filesystem::create_directories(dir);
  const auto cfgPath = dir / "config.json", genPath = dir / "generation_config.json";
  fuzz::writeFile(cfgPath, reinterpret_cast<const uint8_t*>(config.data()), config.size());
  std::string gen;
  std::filesystem::remove(genPath);
  if (at != std::string::npos) {
    gen = in.substr(at + sep.size());
    fuzz::writeFile(genPath, reinterpret_cast<const uint8_t*>(gen.data()), gen.size());
  }
  fuzz::accepts([&] {
    ModelConfig c = ModelConfig::load(cfgPath.string());
    c.mergeGenerationConfig(genPath.string());
    (void)c.isSlidingLayer(c.numLayers - 1);
  });
  fuzz::expectUnchanged(cfgPath, reinterpret_cast<const uint8_t*>(config.data()), config.size());
  if (at != std::string::npos)
    fuzz::expectUnchanged(genPath, reinterpret_cast<const uint8_t*>(gen.data()), gen.size());
  return 0;
}
