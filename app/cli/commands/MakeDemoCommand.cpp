// make-demo DIR: a deterministic random-weight checkpoint in HuggingFace save_pretrained
// layout, so KV Scope (and transformers) can be tried without downloading a model.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "CliCommands.hpp"
#include "kvscope/CheckpointWriter.hpp"

namespace kvscope::cli {

namespace {

struct MakeDemoOptions {
  std::string dir;
  std::string preset = "demo";
  std::string arch;
  std::string dtype;
  std::string configStyle;
  int64_t shards = 0;  // 0: keep the preset's
  int64_t slidingWindow = -1;    // -1: keep the preset's
  int64_t maxWindowLayers = -1;  // Qwen2: layers below this attend fully (-1: keep)
  uint64_t seed = 0;
  bool seedGiven = false;
  bool force = false;
};

std::string humanBytes(uint64_t n) {
  std::ostringstream os;
  if (n >= (1ull << 30))
    os << std::fixed << std::setprecision(2) << static_cast<double>(n) / (1ull << 30) << " GiB";
  else if (n >= (1u << 20))
    os << std::fixed << std::setprecision(1) << static_cast<double>(n) / (1 << 20) << " MiB";
  else if (n >= (1u << 10))
    os << std::fixed << std::setprecision(1) << static_cast<double>(n) / (1 << 10) << " KiB";
  else
    os << n << " B";
  return os.str();
}

void runMakeDemo(const MakeDemoOptions& o) {
  CheckpointSpec spec = CheckpointSpec::preset(o.preset);
  if (!o.arch.empty()) spec.setArchitecture(parseArchitecture(o.arch));
  if (!o.dtype.empty()) spec.storedDtype = parseStoredDtype(o.dtype);
  if (!o.configStyle.empty()) spec.configStyle = parseConfigStyle(o.configStyle);
  if (o.shards > 0) {
    spec.numShards = o.shards;
    spec.maxShardBytes = 0;
  }
  if (o.seedGiven) spec.seed = o.seed;
  if (o.slidingWindow >= 0) {
    spec.setSlidingWindow(o.slidingWindow);
  }
  if (o.maxWindowLayers >= 0) spec.maxWindowLayers = o.maxWindowLayers;
  const CheckpointWriter writer(spec);  // validates the spec (a window on gpt2 or llama)
  const auto files = writer.write(o.dir, o.force);
  const auto& s = writer.spec();
  std::cout << "wrote a random-weight " << architectureName(s.architecture) << " checkpoint to "
            << o.dir << "\n"
            << "  " << s.numLayers << " layers, hidden " << s.hiddenSize << ", " << s.numHeads
            << " heads (" << s.numKvHeads << " KV), vocab " << s.vocabSize << ", " << s.maxPositions
            << " positions, " << writer.parameterCount() << " parameters, "
            << safetensorsDtypeName(s.storedDtype) << ", config style "
            << (s.configStyle == ConfigStyle::V4 ? "v4" : "v5") << ", seed " << s.seed << "\n";
  for (const auto& f : files) std::cout << "  " << f.path << "  " << humanBytes(f.bytes) << "\n";
}

}  // namespace

void registerMakeDemoCommand(CLI::App& app, CliContext& /*ctx*/) {
  auto opts = std::make_shared<MakeDemoOptions>();
  CLI::App* sub = app.add_subcommand(
      "make-demo", "Write a deterministic random-weight checkpoint in HuggingFace layout");
  sub->add_option("dir", opts->dir, "Output directory (created; must be empty unless --force)")
      ->required();
  sub->add_option("--preset", opts->preset,
                  "demo (tiny Llama with GQA), gpt2-small, or a real model's shape in bf16 "
                  "with 5 GB shards: llama-3.2-1b (2.5 GB), llama-3.1-8b (16 GB), "
                  "qwen2.5-7b (15 GB), qwen3-8b (16 GB), qwen3-14b (29.5 GB), qwen3.5-9b (17 GB)")
      ->check(CLI::IsMember(CheckpointSpec::presetNames()));
  sub->add_option("--arch", opts->arch, "Architecture (model_type): " + supportedModelTypes())
      ->check(CLI::IsMember(supportedModelTypeList()));
  sub->add_option("--dtype", opts->dtype, "Stored dtype: F32, F16 or BF16");
  sub->add_option("--shards", opts->shards, "Number of weight files (1: model.safetensors)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--config-style", opts->configStyle,
                  "v4 (rope_theta, torch_dtype) or v5 (rope_parameters, dtype)")
      ->check(CLI::IsMember({"v4", "v5"}));
  auto* seed = sub->add_option("--seed", opts->seed, "Random seed (default 0)");
  sub->add_option("--sliding-window", opts->slidingWindow,
                  "Sliding attention window W (mistral: every layer; qwen2, qwen3: layers from "
                  "--max-window-layers on, with use_sliding_window; 0 = none)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-window-layers", opts->maxWindowLayers,
                  "qwen2, qwen3: the layers below this index attend over everything")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--force", opts->force,
                "Write into a non-empty directory, replacing only the files make-demo writes");
  sub->callback([opts, seed] {
    opts->seedGiven = seed->count() > 0;
    runMakeDemo(*opts);
  });
}

}  // namespace kvscope::cli
