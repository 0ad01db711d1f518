#include "ui/bridge/ExportController.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QPixmap>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "kvscope/AuditJob.hpp"
#include "kvscope/TraceMinimizer.hpp"

namespace kvscope::ui {

ExportController::ExportController(QObject* parent) : QObject(parent) {}

QStringList ExportController::bundleFileNames() {
  return {QStringLiteral("screenshot.png"), QStringLiteral("report.json"), QStringLiteral("summary.md")};
}

bool ExportController::formatForPath(const QString& path, ExportFormat* format) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == QLatin1String("png")) *format = ExportFormat::Png;
  else if (suffix == QLatin1String("svg")) *format = ExportFormat::Svg;
  else if (suffix == QLatin1String("pdf")) *format = ExportFormat::Pdf;
  else return false;
  return true;
}

bool ExportController::mayWrite(const QStringList& paths, QString* error) const {
  QStringList existing;
  for (const QString& p : paths)
    if (QFileInfo::exists(p)) existing << QDir::toNativeSeparators(p);
  if (existing.isEmpty() || policy_ == OverwritePolicy::Overwrite) return true;
  if (policy_ == OverwritePolicy::Ask && ask_ && ask_(existing)) return true;
  *error = tr("refusing to overwrite existing file(s): %1").arg(existing.join(QStringLiteral(", ")));
  return false;
}

ExportOutcome ExportController::exportWidget(QWidget* widget, const QString& path) const {
  ExportFormat format;
  if (!formatForPath(path, &format)) {
    ExportOutcome out;
    out.error = tr("%1: unknown export format (use .png, .svg or .pdf)").arg(path);
    return out;
  }
  return exportWidget(widget, path, format);
}

ExportOutcome ExportController::exportWidget(QWidget* widget, const QString& path, ExportFormat format) const {
  ExportOutcome out;
  if (!widget) {
    out.error = tr("nothing to export");
    return out;
  }
  const QString abs = QFileInfo(path).absoluteFilePath();
  if (!mayWrite({abs}, &out.error)) return out;
  const QDir dir = QFileInfo(abs).absoluteDir();
  if (!dir.exists() && !QDir().mkpath(dir.absolutePath())) {
    out.error = tr("%1: cannot create the folder: %2").arg(dir.absolutePath(), whyNoFolder(dir.absolutePath()));
    return out;
  }
  bool ok = false;
  switch (format) {
    case ExportFormat::Png: ok = writePng(widget, abs, &out.error); break;
    case ExportFormat::Svg: ok = writeSvg(widget, abs, &out.error); break;
    case ExportFormat::Pdf: ok = writePdf(widget, abs, &out.error); break;
  }
  out.ok = ok;
  if (ok) out.written << abs;
  return out;
}

QString ExportController::cliBesideThisProgram() {
  // Installed: kvscope and kvscope-cli share bin/; in a build tree, app/gui and app/cli.
  const QDir here(QCoreApplication::applicationDirPath());
  const QStringList candidates{here.filePath(QStringLiteral("kvscope-cli")),
                               here.filePath(QStringLiteral("../cli/kvscope-cli"))};
  for (const QString& c : candidates)
    if (QFileInfo(c).isExecutable()) return QFileInfo(c).absoluteFilePath();
  return QFileInfo(candidates.front()).absoluteFilePath();
}

QString ExportController::whyNoFolder(const QString& folder) {
  // The nearest existing ancestor says why: a file in the way, or a folder not writable.
  QFileInfo up(folder);
  while (!up.exists() && up.absoluteFilePath() != up.absolutePath()) up = QFileInfo(up.absolutePath());
  if (up.exists() && !up.isDir()) return tr("%1 is a file, not a folder").arg(up.absoluteFilePath());
  return tr("%1 is not writable").arg(up.absoluteFilePath());
}

QString ExportController::whyNotWritable(const QString& path) {
  // The system's reason (a read-only folder: "Permission denied"), from a real attempt.
  QSaveFile probe(path);
  if (!probe.open(QIODevice::WriteOnly)) return probe.errorString();
  probe.cancelWriting();
  probe.commit();
  return tr("unknown reason");
}

bool ExportController::writePng(QWidget* widget, const QString& path, QString* error) {
  const QPixmap pm = widget->grab();
  if (pm.isNull()) {
    *error = tr("%1: could not write the PNG: nothing to draw").arg(path);
    return false;
  }
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) {
    *error = tr("%1: could not write the PNG: %2").arg(path, f.errorString());
    return false;
  }
  // Quality 0 is zlib's strongest compression for PNG: lossless, a few percent smaller.
  if (!pm.save(&f, "PNG", 0) || !f.commit()) {
    *error = tr("%1: could not write the PNG: %2").arg(path, f.errorString());
    return false;
  }
  return true;
}

bool ExportController::writeSvg(QWidget* widget, const QString& path, QString* error) {
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(widget->size());
  svg.setViewBox(QRect(QPoint(0, 0), widget->size()));
  svg.setTitle(QStringLiteral("KV Scope"));
  svg.setDescription(QStringLiteral("KV Scope inspector export"));
  QPainter painter;
  if (!painter.begin(&svg)) {
    *error = tr("%1: could not write the SVG: %2").arg(path, whyNotWritable(path));
    return false;
  }
  widget->render(&painter, QPoint(), QRegion(), QWidget::DrawChildren);
  painter.end();
  return QFileInfo(path).size() > 0;
}

bool ExportController::writePdf(QWidget* widget, const QString& path, QString* error) {
  QPdfWriter pdf(path);
  pdf.setTitle(QStringLiteral("KV Scope"));
  pdf.setCreator(QStringLiteral("KV Scope"));
  pdf.setResolution(96);
  // One page the size of the widget (in points at 96 dpi) with a small margin.
  const QSizeF points(widget->width() * 72.0 / 96.0, widget->height() * 72.0 / 96.0);
  pdf.setPageSize(QPageSize(points, QPageSize::Point, QString(), QPageSize::ExactMatch));
  pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
  QPainter painter;
  if (!painter.begin(&pdf)) {
    *error = tr("%1: could not write the PDF: %2").arg(path, whyNotWritable(path));
    return false;
  }
  const QRect page = painter.viewport();
  const double scale = std::min(page.width() / double(std::max(1, widget->width())),
                                page.height() / double(std::max(1, widget->height())));
  painter.scale(scale, scale);
  widget->render(&painter, QPoint(), QRegion(), QWidget::DrawChildren);
  painter.end();
  return true;
}

nlohmann::json ExportController::inputsJson(const BundleInputs& in) {
  auto list = [](const QStringList& l) {
    nlohmann::json a = nlohmann::json::array();
    for (const QString& s : l) a.push_back(s.toStdString());
    return a;
  };
  auto path = [](const QString& p) {
    return p.isEmpty() ? nlohmann::json() : nlohmann::json(p.toStdString());
  };
  return {{"model_dir", path(in.modelDir)},
          {"trace", path(in.traceFile)},
          {"reference_trace", path(in.referenceTraceFile)},
          {"weights_versions", list(in.weightsVersions)},
          {"faults", list(in.faults)},
          {"prompts", list(in.prompts)}};
}

std::string ExportController::inputsMarkdown(const BundleInputs& in) {
  std::string md = "## Inputs\n\n- KV Scope version: " + in.toolVersion.toStdString() + "\n";
  auto line = [&md](const char* what, const QString& value) {
    if (!value.isEmpty()) md += std::string("- ") + what + ": `" + value.toStdString() + "`\n";
  };
  line("Model directory", in.modelDir);
  line("Trace", in.traceFile);
  line("Reference trace", in.referenceTraceFile);
  for (const QString& w : in.weightsVersions) line("Weights version", w);
  for (const QString& f : in.faults) line("Fault", f);
  for (const QString& p : in.prompts) line("Prompt", p);
  return md + "\n";
}

ExportOutcome ExportController::exportBundle(QWidget* window, const AuditJobOutput& output,
                                             const QString& directory, const BundleInputs& inputs,
                                             const MinimizeForBundle& minimize,
                                             const QString& whyNoMinimized) const {
  ExportOutcome out;
  const QDir dir(QFileInfo(directory).absoluteFilePath());
  QStringList paths;
  for (const QString& name : bundleFileNames()) paths << dir.filePath(name);
  QStringList checked = paths;
  if (minimize)
    for (const QString& name : {minimizedFileName(), QStringLiteral("minimized.reference.kvtrace"),
                                QStringLiteral("reproduce.sh")})
      checked << dir.filePath(name);
  if (!mayWrite(checked, &out.error)) return out;
  if (!dir.exists() && !QDir().mkpath(dir.absolutePath())) {
    out.error = tr("%1: cannot create the folder: %2").arg(dir.absolutePath(), whyNoFolder(dir.absolutePath()));
    return out;
  }
  if (!writePng(window, paths[0], &out.error)) return out;
  out.written << paths[0];
  auto writeText = [&out](const QString& path, const std::string& text) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(text.data(), static_cast<qint64>(text.size())) < 0 ||
        !f.commit()) {
      out.error = tr("%1: could not write: %2").arg(path, f.errorString());
      return false;
    }
    out.written << path;
    return true;
  };
  nlohmann::json report = output.result.report.toJson();
  report["inputs"] = inputsJson(inputs);
  report["tool"] = {{"name", "kvscope"}, {"version", inputs.toolVersion.toStdString()}};
  // The inputs after the verdict's summary, before the findings: what to run to see it again.
  std::string summary = output.result.report.toMarkdown();
  const auto findings = summary.find("## Findings");
  summary.insert(findings == std::string::npos ? summary.size() : findings, inputsMarkdown(inputs));
  if (minimize) {
    QString why;
    const auto r = minimize(dir.filePath(minimizedFileName()), &why);
    if (r) {
      for (const auto& p : r->written) out.written << QString::fromStdString(p);
      summary += r->markdown;
      report["minimized"] = {{"trace", minimizedFileName().toStdString()},
                             {"command", r->command},
                             {"bytes_before", r->bytesBefore},
                             {"bytes_after", r->bytesAfter}};
      if (!writeText(dir.filePath(QStringLiteral("reproduce.sh")), reproduceScript(r->command, cliBesideThisProgram().toStdString())))
        return out;
      QFile::setPermissions(dir.filePath(QStringLiteral("reproduce.sh")),
                            QFile::permissions(dir.filePath(QStringLiteral("reproduce.sh"))) |
                                QFileDevice::ExeOwner | QFileDevice::ExeGroup |
                                QFileDevice::ExeOther);
    } else {
      summary += "\n## Minimal reproducer\n\nNot written: " + why.toStdString() + "\n";
    }
  } else if (!whyNoMinimized.isEmpty()) {
    report["minimized_absent"] = whyNoMinimized.toStdString();
    summary += "\n## Minimal reproducer\n\nNo minimized trace in this bundle: " +
               whyNoMinimized.toStdString() + ".\n";
  }
  if (!writeText(paths[1], report.dump(2) + "\n")) return out;
  if (!writeText(paths[2], summary)) return out;
  out.ok = true;
  return out;
}

bool ExportController::canMinimize(const AuditJobSpec& spec, const AuditJobOutput* output) {
  return whyNotMinimizable(spec, output).isEmpty();
}

QString ExportController::whyNotMinimizable(const AuditJobSpec& spec, const AuditJobOutput* output) {
  if (!output) return tr("nothing has been audited");
  if (!minimizeTarget(output->result.report))
    return output->result.report.clean()
               ? tr("the audit is clean, so there is no finding to reproduce")
               : tr("the audit's findings name no step a cut trace could keep");
  if (spec.modelDir.empty() && !output->result.referenceTrace)
    return tr("the inputs of the audit on screen are not known (no model directory or "
              "reference trace to audit a cut trace with)");
  return QString();
}

EngineWork ExportController::minimizeWork(const AuditJobSpec& spec,
                                          std::shared_ptr<const AuditJobOutput> output,
                                          const QString& tracePath, const QString& commandPath) {
  // The command runs from where the trace lies (a bundle's reproduce.sh changes there).
  return
      [spec = withAbsolutePaths(spec), output = std::move(output), path = tracePath.toStdString(),
       command = commandPath.toStdString()](const EngineTaskContext& ctx) -> EnginePayload {
        if (ctx.progress) ctx.progress(0.0, "minimizing the trace");
        const MinimizedTrace m = minimizeAudit(spec, *output);
        auto r = std::make_shared<const Reproducer>(
            writeReproducer(spec, m, path, command, true, auditedTraceBytes(spec, *output)));
        if (ctx.progress) ctx.progress(1.0, "minimized");
        return r;
      };
}

}  // namespace kvscope::ui
