// Small random checkpoints written into per-process temporary directories (removed at
// exit), and helpers that rewrite their weight files: change tensors, drop one, or edit
// the safetensors header in place to craft malformed files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"

namespace kvscope::test {

namespace scratch_fs = std::filesystem;

/// One root per test process and per `tag`, removed when the process exits.
inline const scratch_fs::path& scratchRoot(const std::string& tag) {
  struct Root {
    scratch_fs::path path;
    ~Root() {
      std::error_code ec;
      scratch_fs::remove_all(path, ec);
    }
  };
  static std::map<std::string, Root> roots;
  Root& r = roots[tag];
  if (r.path.empty())
    r.path =
        scratch_fs::temp_directory_path() / ("kvscope-" + tag + "-" + std::to_string(::getpid()));
  return r.path;
}

/// An empty (freshly removed) directory path under the root; not created.
inline scratch_fs::path scratchDir(const std::string& tag, const std::string& name) {
  const scratch_fs::path d = scratchRoot(tag) / name;
  scratch_fs::remove_all(d);
  scratch_fs::create_directories(d.parent_path());
  return d;
}

/// A small Llama-family spec (vocab 300, hidden 32, 2 layers, 4 heads / 2 KV heads).
inline CheckpointSpec smallSpec(Architecture arch = Architecture::Llama) {
  CheckpointSpec s = CheckpointSpec::demo();
  s.setArchitecture(arch);
  s.vocabSize = 300;
  s.hiddenSize = 32;
  s.numLayers = 2;
  s.numHeads = 4;
  // GPT-2 and DeepSeek's latent attention: every head has its key and value (kv heads = heads).
  s.numKvHeads = arch == Architecture::Gpt2 || arch == Architecture::DeepseekV3 || arch == Architecture::DeepseekV2 ? 4 : 2;
  s.intermediateSize = 64;
  s.maxPositions = 64;
  return s;
}

inline std::string writeScratchCheckpoint(const std::string& tag, const std::string& name,
                                          const CheckpointSpec& spec) {
  const scratch_fs::path d = scratchDir(tag, name);
  CheckpointWriter(spec).write(d.string());
  return d.string();
}

/// Rewrites a single-file checkpoint's model.safetensors: `edit` sees every tensor as
/// float32 and returns false to drop it; the file is written in `dtype`.
inline void rewriteTensors(const std::string& dir,
                           const std::function<bool(const std::string&, FloatTensor&)>& edit,
                           SafetensorsDtype dtype = SafetensorsDtype::F32) {
  const std::string path = dir + "/model.safetensors";
  SafetensorsWriter w;
  {
    auto file = SafetensorsFile::open(path);
    for (const auto& [k, v] : file->metadata()) w.setMetadata(k, v);
    for (const auto& name : file->names()) {
      FloatTensor t = file->readFloat(name);
      if (edit(name, t)) w.addFloat(name, t, dtype);
    }
  }  // unmapped before the file is replaced
  w.write(path, /*overwrite=*/true);
}

inline std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Edits the JSON header of a safetensors file and writes it back (padded with spaces to
/// a multiple of 8) in front of the unchanged data buffer.
inline void editSafetensorsHeader(const std::string& path,
                                  const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = readBytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  const uint64_t newLen = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &newLen, 8);
  writeBytes(path, out + text + bytes.substr(8 + n));
}

}  // namespace kvscope::test
