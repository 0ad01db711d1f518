// The llama fixture with a rope_scaling block in its config.json (linear factor 2, or
// llama3 factor 8 over an original context of 64), written once per test process into a
// scratch folder; the fixture itself is never modified.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ScratchDir.hpp"
#include "TestSupport.hpp"

namespace kvscope::test {

/// `type`: "linear" or "llama3"; `factor` 0: 2 for linear, 8 for llama3. Returns the
/// checkpoint directory.
/// The same for another checkpoint directory `source` (a copy named after `tag`).
inline std::string ropeScalingCopy(const std::filesystem::path& source, const std::string& tag,
                                   const std::string& type, double factor = 0) {
  namespace fs = std::filesystem;
  if (factor <= 0) factor = type == "linear" ? 2.0 : 8.0;
  const fs::path dir = scratchDir(tag + "rope-scaling-" + type + "-" +
                                  std::to_string(static_cast<int>(factor * 100)));
  if (fs::exists(dir / "model.safetensors")) return dir.string();
  const fs::path& src = source;
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "config.json")
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  nlohmann::json cfg;
  std::ifstream(src / "config.json") >> cfg;
  nlohmann::json rope = {{"rope_theta", 10000.0}, {"rope_type", type}};
  rope["factor"] = factor;  // linear 2: a dropped factor puts position p where 2p belongs
  if (type == "llama3") {
    rope["low_freq_factor"] = 1.0;
    rope["high_freq_factor"] = 4.0;
    rope["original_max_position_embeddings"] = 64;
  }
  cfg["rope_parameters"] = rope;
  std::ofstream(dir / "config.json") << cfg.dump(1);
  return dir.string();
}

inline std::string ropeScalingLlama(const std::string& type, double factor = 0) {
  return ropeScalingCopy(hfModel("llama"), "", type, factor);
}

}  // namespace kvscope::test
