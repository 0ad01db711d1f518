// The real audit every UI test inspects: the built-in engine on a random-weight demo
// checkpoint (CheckpointSpec::demo(): Llama-style, 3 layers, 2 kv heads, d = 16, vocab
// 512, written once per test process in milliseconds) with two requests of 4 prompt ids
// and 6 steps each, and two faults the audit must find: layer 2 stores and reads layer
// 1's K/V from step 3 of request 0 (wrong_layer), and request 1 is written into request
// 0's cache row when it arrives at tick 4 (cross_request). runAuditJob runs the whole
// audit: the report, the reference and every number the views show are the real ones.
#pragma once

#include <QDir>
#include <QTemporaryDir>
#include <memory>
#include <stdexcept>
#include <string>

#include "kvscope/AuditJob.hpp"
#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"

namespace kvscope::ui::test {

/// The demo checkpoint's directory (written on first use, removed at exit).
inline std::string demoModelDir() {
  static QTemporaryDir dir;
  static bool written = false;
  if (!dir.isValid()) throw std::runtime_error("no temporary directory for the demo checkpoint");
  const std::string path = dir.filePath(QStringLiteral("demo-model")).toStdString();
  if (!written) {
    CheckpointWriter(CheckpointSpec::demo()).write(path);
    written = true;
  }
  return path;
}

/// The audit of the tests: faults as described above unless `faults` says otherwise.
inline AuditJobSpec testAuditSpec(std::vector<std::string> faults = {
                                      "wrong_layer:layer=2,source=1,step=3",
                                      "cross_request:request=1,victim=0"}) {
  AuditJobSpec spec;
  spec.modelDir = demoModelDir();
  spec.promptIds = {{11, 42, 7, 300}, {5, 99, 123, 64}};
  spec.arrivalTicks = {0, 4};
  spec.maxNewTokens = 6;
  spec.faults = std::move(faults);
  return spec;
}

inline std::shared_ptr<const AuditJobOutput> makeTestOutput() {
  static const auto output = std::make_shared<const AuditJobOutput>(runAuditJob(testAuditSpec()));
  return output;
}

/// A Qwen3.5 demo checkpoint (make-demo's: Gated DeltaNet layers 0 and 2, written once) run
/// with prefix caching: request 1 shares request 0's first two blocks of 4 and arrives a tick
/// later, and the prefix_state fault hands it the attention rows without the recurrent state.
inline std::shared_ptr<const AuditJobOutput> makeRecurrentStateOutput() {
  static const auto output = [] {
    static QTemporaryDir dir;
    if (!dir.isValid()) throw std::runtime_error("no temporary directory for the Qwen3.5 demo checkpoint");
    CheckpointSpec model = CheckpointSpec::demo();
    model.setArchitecture(Architecture::Qwen3_5);
    model.numLayers = 4;
    const std::string path = dir.filePath(QStringLiteral("qwen3_5-demo")).toStdString();
    CheckpointWriter(model).write(path);
    AuditJobSpec spec;
    spec.modelDir = path;
    spec.promptIds = {{11, 42, 7, 300, 5, 99, 123, 64, 8, 9}, {11, 42, 7, 300, 5, 99, 123, 64, 17, 18, 19}};
    spec.arrivalTicks = {0, 1};
    spec.maxNewTokens = 4;
    spec.faults = {"prefix_state:block=4"};
    return std::make_shared<const AuditJobOutput>(runAuditJob(spec));
  }();
  return output;
}

/// A DeepSeek V2 demo checkpoint (make-demo's: latent attention, experts in groups, written
/// once) with the mla_absorb fault on layer 1: the K/V panel's layer summary is at its longest.
inline std::shared_ptr<const AuditJobOutput> makeLatentOutput() {
  static const auto output = [] {
    static QTemporaryDir dir;
    if (!dir.isValid()) throw std::runtime_error("no temporary directory for the DeepSeek V2 demo checkpoint");
    CheckpointSpec model = CheckpointSpec::demo();
    model.setArchitecture(Architecture::DeepseekV2);
    const std::string path = dir.filePath(QStringLiteral("deepseek_v2-demo")).toStdString();
    CheckpointWriter(model).write(path);
    AuditJobSpec spec;
    spec.modelDir = path;
    spec.promptIds = {{11, 42, 7, 300, 5}};
    spec.maxNewTokens = 4;
    spec.faults = {"mla_absorb:layer=1"};
    return std::make_shared<const AuditJobOutput>(runAuditJob(spec));
  }();
  return output;
}

/// The same requests without faults: a clean audit.
inline std::shared_ptr<const AuditJobOutput> makeCleanOutput() {
  static const auto output = std::make_shared<const AuditJobOutput>(runAuditJob(testAuditSpec({})));
  return output;
}

}  // namespace kvscope::ui::test
