// ui_step_bench: how long "step to the next token" takes with every panel updating, on a
// real audit of a random-weight GPT-2-small-shaped checkpoint (12 layers x 12 kv heads x
// d 64, vocab 8192; written to a temporary directory): 256 prompt + 256 generated tokens
// = 512 positions after the last step, layer 7 reading layer 6's K/V from step 100.
// Each sample: SelectionContext::nextStep(), wait until the engine thread delivered the
// step snapshot and the context accepted it, process events (queued replots), then
// grab() the whole window to force every widget to paint. Prints median and p95 in ms.
//   QT_QPA_PLATFORM=offscreen ./ui_step_bench [samples]
#include <QApplication>
#include <QElapsedTimer>
#include <QPixmap>
#include <QTemporaryDir>
#include <QTextStream>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Inspection.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/InspectorWindow.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

void report(const char* what, const std::vector<double>& ms) {
  std::printf("%-44s median %8.2f ms   p95 %8.2f ms   (n=%zu)\n", what, percentile(ms, 0.5),
              percentile(ms, 0.95), ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") && qEnvironmentVariableIsEmpty("DISPLAY"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const int samples = argc > 1 ? std::max(5, std::atoi(argv[1])) : 60;

  QTemporaryDir dir;
  const std::string model = dir.filePath(QStringLiteral("gpt2-small")).toStdString();
  const CheckpointSpec shape = CheckpointSpec::gpt2Small();
  CheckpointWriter(shape).write(model);
  AuditJobSpec spec;
  spec.modelDir = model;
  spec.promptIds.emplace_back();
  for (int64_t i = 0; i < 256; ++i)
    spec.promptIds.back().push_back((i * 37 + 11) % (shape.vocabSize - 1));
  spec.maxNewTokens = 256;
  spec.faults = {"wrong_layer:layer=7,source=6,step=100"};
  QElapsedTimer build;
  build.start();
  auto output = std::make_shared<const AuditJobOutput>(runAuditJob(spec));
  std::printf(
      "audit: %lld layers x %lld heads x 512 positions x d %lld, vocab %lld (generated and audited "
      "in %lld ms)\n",
      static_cast<long long>(shape.numLayers), static_cast<long long>(shape.numKvHeads),
      static_cast<long long>(shape.hiddenSize / shape.numHeads),
      static_cast<long long>(shape.vocabSize), static_cast<long long>(build.elapsed()));

  InspectorWindow window(nullptr, {});
  window.resize(1680, 1050);
  window.show();
  window.showOutput(output);
  SelectionContext* ctx = window.context();
  ctx->select(InspectionPoint{0, 200, 7, 3, KvKind::Keys});
  if (!window.controller()->waitUntilSettled(60000)) {
    std::fprintf(stderr, "ui_step_bench: the view never settled\n");
    return 1;
  }
  (void)window.grab();

  // Where the time goes on the engine thread: stepping forward (the per-layer maxima are
  // extended by the appended records) and a jump (every layer's cache compared in full).
  std::vector<double> forwardMs, jumpMs;
  {
    Inspector inspector(output);
    (void)inspector.view(InspectionPoint{0, 149, 7, 3, KvKind::Keys});
    for (int i = 0; i < std::min(samples, 30); ++i) {
      QElapsedTimer t;
      t.start();
      auto snap = inspector.view(InspectionPoint{0, 150 + i, 7, 3, KvKind::Keys});
      forwardMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
    }
    for (int i = 0; i < std::min(samples, 30); ++i) {
      Inspector fresh(output);
      QElapsedTimer t;
      t.start();
      auto snap = fresh.view(InspectionPoint{0, 200 + i, 7, 3, KvKind::Keys});
      jumpMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
    }
  }

  std::vector<double> stepMs, settleMs, eventsMs, paintMs;
  ctx->select(InspectionPoint{0, 190, 7, 3, KvKind::Keys});
  window.controller()->waitUntilSettled(60000);
  for (int i = 0; i < samples; ++i) {
    if (ctx->selection().step >= spec.maxNewTokens - 1)
      ctx->setStep(1), window.controller()->waitUntilSettled(60000);
    QElapsedTimer t;
    t.start();
    const int64_t before = ctx->selection().step;
    ctx->nextStep();
    if (!window.controller()->waitUntilSettled(60000) || ctx->selection().step != before + 1) {
      std::fprintf(stderr, "ui_step_bench: step %lld did not settle\n", static_cast<long long>(before + 1));
      return 1;
    }
    const qint64 settled = t.nsecsElapsed();
    QCoreApplication::processEvents();
    const qint64 events = t.nsecsElapsed();
    const QPixmap pm = window.grab();
    const qint64 painted = t.nsecsElapsed();
    stepMs.push_back(static_cast<double>(painted) / 1e6);
    settleMs.push_back(static_cast<double>(settled) / 1e6);
    eventsMs.push_back(static_cast<double>(events - settled) / 1e6);
    paintMs.push_back(static_cast<double>(painted - events) / 1e6);
    if (pm.isNull()) return 1;
  }
  report("snapshot, step forward (engine thread)", forwardMs);
  report("snapshot, jump: full comparison (engine)", jumpMs);
  report("  of which: snapshot delivered + views updated", settleMs);
  report("  of which: queued replots", eventsMs);
  report("  of which: grab() of the whole window", paintMs);
  report("step to next token, every panel painted", stepMs);
  return 0;
}
