// Exports: a widget (one view or the whole window) as PNG, SVG (QSvgGenerator) or PDF
// (QPdfWriter), and a bug-report bundle (screenshot PNG, report JSON, Markdown summary
// and, after an audit with a finding, the minimized trace with the command that reproduces
// the verdict on it) into a folder. Existing files are never overwritten silently: the policy asks
// (GUI), refuses (headless) or, only when the user said so, overwrites.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "ui/bridge/EngineTask.hpp"

namespace kvscope {
struct AuditJobOutput;
struct AuditJobSpec;
struct Reproducer;
}

class QWidget;

namespace kvscope::ui {

enum class ExportFormat { Png, Svg, Pdf };

/// What the bundle names besides the report: the inputs the audit ran on (absolute paths)
/// and the tool's version, so that a bug report can be reproduced.
struct BundleInputs {
  QString modelDir, traceFile, referenceTraceFile;
  QStringList weightsVersions;  // "N=DIR"
  QStringList faults;           // built-in engine faults, NAME:k=v,...
  QStringList prompts;
  QString toolVersion;  // kvscope/BuildInfo.hpp
};

struct ExportOutcome {
  bool ok = false;
  QStringList written;   // absolute paths
  QString error;         // why not (names the file)
};

class ExportController : public QObject {
  Q_OBJECT

 public:
  enum class OverwritePolicy { Ask, Refuse, Overwrite };
  /// Asked with the files that exist; returns true to overwrite them.
  using AskOverwrite = std::function<bool(const QStringList& existing)>;
  /// Writes the minimized trace to `tracePath` (on the engine thread: the caller posts
  /// minimizeWork and waits) and returns the reproducer, or null with `error` set.
  using MinimizeForBundle =
      std::function<std::shared_ptr<const Reproducer>(const QString& tracePath, QString* error)>;

  explicit ExportController(QObject* parent = nullptr);

  void setOverwritePolicy(OverwritePolicy policy) { policy_ = policy; }
  OverwritePolicy overwritePolicy() const { return policy_; }
  void setAskOverwrite(AskOverwrite ask) { ask_ = std::move(ask); }

  /// Format from the file suffix (.png/.svg/.pdf); false for anything else.
  static bool formatForPath(const QString& path, ExportFormat* format);

  ExportOutcome exportWidget(QWidget* widget, const QString& path) const;
  ExportOutcome exportWidget(QWidget* widget, const QString& path, ExportFormat format) const;
  /// screenshot.png, report.json and summary.md in `directory` (created when missing);
  /// report.json gets "inputs" and "tool", summary.md an Inputs list, from `inputs`.
  /// With `minimize` (an audit with a finding): also minimized.kvtrace (and, trace+trace,
  /// minimized.reference.kvtrace) and reproduce.sh; report.json gets "minimized" and
  /// summary.md the "Minimal reproducer" section with the kvscope-cli command. A
  /// minimization that fails leaves the other files and says why in summary.md. Without
  /// `minimize`, `whyNoMinimized` (whyNotMinimizable) says in summary.md and report.json
  /// ("minimized_absent") why the bundle holds no minimized trace.
  ExportOutcome exportBundle(QWidget* window, const AuditJobOutput& output,
                             const QString& directory, const BundleInputs& inputs = {},
                             const MinimizeForBundle& minimize = {},
                             const QString& whyNoMinimized = {}) const;
  /// The engine-thread work that minimizes `output`'s audit of `spec` and writes the
  /// reproducer to `tracePath`, naming `commandPath` in the command (writeReproducer, as
  /// kvscope-cli does). Its payload is a `const kvscope::Reproducer`.
  static EngineWork minimizeWork(const AuditJobSpec& spec,
                                 std::shared_ptr<const AuditJobOutput> output,
                                 const QString& tracePath, const QString& commandPath);
  /// Whether `output` has a finding a minimized trace can reproduce with `spec`'s inputs.
  static bool canMinimize(const AuditJobSpec& spec, const AuditJobOutput* output);
  /// Why not (empty when it can): nothing audited, a clean audit, or inputs that cannot
  /// re-audit a cut trace.
  static QString whyNotMinimizable(const AuditJobSpec& spec, const AuditJobOutput* output);
  static QString minimizedFileName() { return QStringLiteral("minimized.kvtrace"); }
  static nlohmann::json inputsJson(const BundleInputs& inputs);
  static std::string inputsMarkdown(const BundleInputs& inputs);

  static QStringList bundleFileNames();
  /// The kvscope-cli a bundle's reproduce.sh runs when $KVSCOPE_CLI is unset: beside this
  /// program (bin/, or app/cli beside app/gui in a build tree).
  static QString cliBesideThisProgram();

 private:
  bool mayWrite(const QStringList& paths, QString* error) const;
  static bool writePng(QWidget* widget, const QString& path, QString* error);
  /// Why `path` cannot be written (the system's reason, e.g. "Permission denied").
  static QString whyNotWritable(const QString& path);
  /// Why `folder` cannot be created (a file in the way, a parent that is not writable).
  static QString whyNoFolder(const QString& folder);
  static bool writeSvg(QWidget* widget, const QString& path, QString* error);
  static bool writePdf(QWidget* widget, const QString& path, QString* error);

  OverwritePolicy policy_ = OverwritePolicy::Refuse;
  AskOverwrite ask_;
};

}  // namespace kvscope::ui
