#include "ui/bridge/HeadlessController.hpp"

#include <QCommandLineParser>
#include <QObject>
#include <QStatusBar>
#include <QTextStream>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <type_traits>

#include "kvscope/Error.hpp"
#include "kvscope/FindingGroups.hpp"
#include "kvscope/SamplingPolicy.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/views/HeadlineView.hpp"

namespace kvscope::ui {

namespace {

void err(const QString& text) {
  QTextStream(stderr) << "kvscope: " << text << Qt::endl;
}

// The line that says which step the exported picture shows (and why that one).
QString renderedPointText(const SelectionContext& context, const QString& why) {
  const InspectionPoint p = context.selection();
  return QStringLiteral("rendered: request %1, step %2, layer %3 (%4)")
      .arg(p.request)
      .arg(p.step)
      .arg(p.layer)
      .arg(why);
}

}  // namespace

void HeadlessController::addOptions(QCommandLineParser& parser) {
  parser.addOptions({
      {QStringLiteral("audit"),
       QStringLiteral("Headless: run the audit, render the window offscreen, export, exit.")},
      {QStringLiteral("model"), QStringLiteral("Model directory."), QStringLiteral("DIR")},
      {QStringLiteral("trace"), QStringLiteral("Cached trace file."), QStringLiteral("FILE")},
      {QStringLiteral("reference-trace"),
       QStringLiteral("Uncached reference trace (trace+trace mode)."), QStringLiteral("FILE")},
      {QStringLiteral("weights-version"),
       QStringLiteral("N=DIR: the checkpoint of weights version N that the trace's steps name "
                      "(repeatable; --model is version 0)."),
       QStringLiteral("N=DIR")},
      {QStringLiteral("prompt"), QStringLiteral("Prompt text (repeatable)."),
       QStringLiteral("TEXT")},
      {QStringLiteral("arrival"),
       QStringLiteral("Arrival tick of the matching --prompt (repeatable; default 0)."),
       QStringLiteral("TICK")},
      {QStringLiteral("max-new"), QStringLiteral("Maximum new tokens (default 16)."),
       QStringLiteral("N")},
      {QStringLiteral("temperature"), QStringLiteral("Sampling temperature (0 = greedy)."),
       QStringLiteral("T")},
      {QStringLiteral("top-k"), QStringLiteral("Top-k, K >= 1 (leave out for none)."),
       QStringLiteral("K")},
      {QStringLiteral("top-p"), QStringLiteral("Top-p in (0, 1] (leave out for none)."),
       QStringLiteral("P")},
      {QStringLiteral("seed"), QStringLiteral("Sampling seed."), QStringLiteral("SEED")},
      {QStringLiteral("fault"),
       QStringLiteral("Fault for the built-in engine, NAME[:k=v,...] (repeatable)."),
       QStringLiteral("SPEC")},
      {QStringLiteral("export-png"), QStringLiteral("Headless: write the window as PNG."),
       QStringLiteral("OUT.png")},
      {QStringLiteral("export-bundle"),
       QStringLiteral("Headless: write screenshot.png, report.json, summary.md."),
       QStringLiteral("DIR")},
      {QStringLiteral("select-divergence"),
       QStringLiteral("Select the first divergence before rendering (the default when there is one).")},
      {QStringLiteral("select-finding"),
       QStringLiteral(
           "Select a finding (its id, e.g. cross_request, or its 0-based row) before rendering."),
       QStringLiteral("ID")},
      {QStringLiteral("run"),
       QStringLiteral("Interactive: start the audit as soon as the window opens.")},
      {QStringLiteral("size"),
       QStringLiteral("Window size for headless rendering (default 1680x1050)."),
       QStringLiteral("WxH")},
  });
}

bool HeadlessController::read(const QCommandLineParser& p, HeadlessOptions* o, QString* error) {
  o->audit = p.isSet(QStringLiteral("audit"));
  o->modelDir = p.value(QStringLiteral("model"));
  o->traceFile = p.value(QStringLiteral("trace"));
  o->referenceTraceFile = p.value(QStringLiteral("reference-trace"));
  o->weightsVersions = p.values(QStringLiteral("weights-version"));
  try {  // the same rule as kvscope-cli (N >= 1, a directory, a model)
    AuditJobSpec check;
    check.modelDir = o->modelDir.toStdString();
    for (const QString& item : o->weightsVersions) addWeightsVersion(check, item.toStdString());
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    return false;
  }
  o->prompts = p.values(QStringLiteral("prompt"));
  o->faults = p.values(QStringLiteral("fault"));
  o->exportPng = p.value(QStringLiteral("export-png"));
  o->exportBundle = p.value(QStringLiteral("export-bundle"));
  o->selectDivergence = p.isSet(QStringLiteral("select-divergence"));
  o->selectFinding = p.value(QStringLiteral("select-finding")).trimmed();
  if (p.isSet(QStringLiteral("select-finding")) && o->selectFinding.isEmpty()) {
    *error = QStringLiteral("--select-finding: expected a finding id, e.g. cross_request");
    return false;
  }
  o->run = p.isSet(QStringLiteral("run"));
  bool ok = true;
  for (const QString& text : p.values(QStringLiteral("arrival"))) {
    const qlonglong tick = text.trimmed().toLongLong(&ok);
    if (!ok || tick < 0) {
      *error = QStringLiteral("--arrival: expected a tick >= 0, got '%1'").arg(text);
      return false;
    }
    o->arrivals << tick;
  }
  if (o->arrivals.size() > o->prompts.size()) {
    *error = QStringLiteral(
                 "--arrival: %1 ticks for %2 prompt(s); give at most one --arrival per --prompt")
                 .arg(o->arrivals.size())
                 .arg(o->prompts.size());
    return false;
  }
  if (p.isSet(QStringLiteral("max-new"))) {
    o->maxNew = p.value(QStringLiteral("max-new")).toInt(&ok);
    if (!ok || o->maxNew < 1) {
      *error = QStringLiteral("--max-new: expected a positive integer, got '%1'").arg(p.value(QStringLiteral("max-new")));
      return false;
    }
  }
  // The sampling options mean what they mean in kvscope-cli (SamplingOptions): a given
  // top-k must be >= 1 and a given top-p in (0, 1]; leave one out for none.
  SamplingOptions sampling;
  const auto number = [&](const char* name, auto* out) {
    if (!p.isSet(QString::fromLatin1(name))) return true;
    bool good = false;
    const QString text = p.value(QString::fromLatin1(name)).trimmed();
    if constexpr (std::is_same_v<std::decay_t<decltype(**out)>, double>)
      *out = text.toDouble(&good);
    else if constexpr (std::is_same_v<std::decay_t<decltype(**out)>, uint64_t>)
      *out = text.toULongLong(&good);
    else
      *out = text.toLongLong(&good);
    if (!good)
      *error = QStringLiteral("--%1: '%2' is not a number").arg(QString::fromLatin1(name), text);
    return good;
  };
  if (!number("temperature", &sampling.temperature) || !number("top-k", &sampling.topK) ||
      !number("top-p", &sampling.topP) || !number("seed", &sampling.seed))
    return false;
  try {
    const SamplingPolicy policy = sampling.policy();
    o->temperature = policy.temperature;
    o->topK = policy.topK ? static_cast<int>(*policy.topK) : 0;
    o->topP = policy.topP.value_or(1.0);
    o->seed = policy.seed;
  } catch (const std::exception& e) {
    *error = QStringLiteral("sampling options: %1").arg(QString::fromStdString(e.what()));
    return false;
  }
  if (p.isSet(QStringLiteral("size"))) {
    const QStringList wh = p.value(QStringLiteral("size")).split(QLatin1Char('x'));
    bool okW = false, okH = false;
    if (wh.size() == 2) o->size = QSize(wh[0].toInt(&okW), wh[1].toInt(&okH));
    if (!okW || !okH || o->size.width() < 200 || o->size.height() < 200) {
      *error = QStringLiteral("--size: expected WxH, e.g. 1680x1050");
      return false;
    }
  }
  return true;
}

AuditJobSpec HeadlessController::specFor(const HeadlessOptions& o) {
  AuditJobSpec s;
  s.modelDir = o.modelDir.toStdString();
  s.traceFile = o.traceFile.toStdString();
  s.referenceTraceFile = o.referenceTraceFile.toStdString();
  for (const QString& item : o.weightsVersions) addWeightsVersion(s, item.toStdString());
  for (const QString& p : o.prompts) s.prompts.push_back(p.toStdString());
  for (qlonglong t : o.arrivals) s.arrivalTicks.push_back(static_cast<int64_t>(t));
  s.maxNewTokens = o.maxNew;
  s.policy.temperature = o.temperature;
  if (o.topK > 0) s.policy.topK = o.topK;
  if (o.topP < 1.0) s.policy.topP = o.topP;
  s.policy.seed = o.seed;
  for (const QString& f : o.faults) s.faults.push_back(f.toStdString());
  return s;
}

bool HeadlessController::configure(InspectorWindow& window, const HeadlessOptions& o,
                                   QString* error) {
  window.setup()->setSpec(specFor(o));
  window.faults()->clearSelection();
  for (const QString& f : o.faults) {
    QString why;
    if (!window.faults()->applySpec(f, &why)) {
      *error = QStringLiteral("--fault %1: %2").arg(f, why);
      return false;
    }
  }
  return true;
}

bool HeadlessController::startInteractive(InspectorWindow& window, const HeadlessOptions& o,
                                          QString* error) {
  // Paths go through openPath so that they land in the recent files.
  if (!o.modelDir.isEmpty() && !window.openPath(o.modelDir)) {
    *error = QStringLiteral("--model: no such directory '%1'").arg(o.modelDir);
    return false;
  }
  if (!o.traceFile.isEmpty() && !window.openPath(o.traceFile)) {
    *error = QStringLiteral("--trace: no such file '%1'").arg(o.traceFile);
    return false;
  }
  HeadlessOptions rest = o;
  rest.modelDir = window.setup()->modelDir();
  rest.traceFile = window.setup()->traceFile();
  if (!configure(window, rest, error)) return false;
  window.show();
  if (!o.selectFinding.isEmpty()) {
    const QString id = o.selectFinding;
    InspectorWindow* w = &window;
    auto select = [w, id] {
      QString why;
      if (!w->selectFinding(id, &why)) err(why);
    };
    // Once: the first audit that finishes selects the finding.
    auto connection = std::make_shared<QMetaObject::Connection>();
    *connection = QObject::connect(window.controller(), &InspectorController::auditSucceeded,
                                   &window, [connection, select] {
                                     QObject::disconnect(*connection);
                                     select();
                                   });
  }
  if (o.run && !window.runAudit()) {
    *error = QStringLiteral("--run: %1").arg(window.headline()->headline());
    return false;
  }
  return true;
}

int HeadlessController::run(const HeadlessOptions& o, EngineController::AuditJobFunction job,
                            std::vector<FaultInfo> catalog) {
  if (o.exportPng.isEmpty() && o.exportBundle.isEmpty()) {
    err(QStringLiteral("--audit needs --export-png OUT.png and/or --export-bundle DIR"));
    return InputError;
  }
  if (o.modelDir.isEmpty() && o.traceFile.isEmpty()) {
    err(QStringLiteral("--audit needs --model DIR and/or --trace FILE"));
    return InputError;
  }
  InspectorWindow window(std::move(job), std::move(catalog));
  window.exporter()->setOverwritePolicy(ExportController::OverwritePolicy::Refuse);
  QString error;
  if (!configure(window, o, &error)) {
    err(error);
    return InputError;
  }

  std::shared_ptr<const AuditJobOutput> output;
  try {
    output = std::make_shared<const AuditJobOutput>(window.engine()->runAuditNow(specFor(o)));
    window.setup()->setProgress(1.0, QStringLiteral("done"));
  } catch (const kvscope::InputError& e) {
    err(QString::fromStdString(e.what()));
    return InputError;
  } catch (const kvscope::UsageError& e) {
    err(QString::fromStdString(e.what()));
    return InputError;
  } catch (const std::exception& e) {
    err(QStringLiteral("internal error: %1").arg(QString::fromStdString(e.what())));
    return InternalError;
  }

  window.resize(o.size);
  window.show();
  window.showOutput(output);
  QString why;
  if (!o.selectFinding.isEmpty()) {
    if (!window.selectFinding(o.selectFinding, &error)) {
      err(error);
      return InputError;
    }
    why = QStringLiteral("the selected finding");
  } else if (window.context()->selectFirstDivergence()) {
    // With or without --select-divergence, the picture shows the divergence when there is
    // one; a run without one shows its first step.
    why = QStringLiteral("the first divergence");
  } else {
    window.context()->select(InspectionPoint{});
    why = output->result.report.clean() ? QStringLiteral("a clean run: its first step")
                                        : QStringLiteral("no divergence to show: the first step");
  }
  if (!window.controller()->waitUntilSettled(60000)) {
    err(QStringLiteral("internal error: the view did not settle"));
    return InternalError;
  }
  QTextStream(stdout) << renderedPointText(*window.context(), why)
                      << Qt::endl;
  window.statusBar()->showMessage(
      QStringLiteral("Audit finished: %1.")
          .arg(QString::fromStdString(findingCountText(output->result.report.findings))));
  int code = output->result.report.clean() ? Clean : Divergent;
  QTextStream(stdout) << HeadlineView::headlineFor(output->result.report) << Qt::endl;
  if (!o.exportPng.isEmpty()) {
    const ExportOutcome out = window.exportWindow(o.exportPng);
    if (!out.ok) {
      err(out.error);
      return InputError;
    }
    QTextStream(stdout) << "wrote " << out.written.join(QStringLiteral(", ")) << Qt::endl;
  }
  if (!o.exportBundle.isEmpty()) {
    const ExportOutcome out = window.exportBundle(o.exportBundle);
    if (!out.ok) {
      err(out.error);
      return InputError;
    }
    QTextStream(stdout) << "wrote " << out.written.join(QStringLiteral(", ")) << Qt::endl;
  }
  window.hide();
  return code;
}

}  // namespace kvscope::ui
