// `kvscope --audit ... --export-png OUT.png`: runs the audit synchronously, renders the same
// window offscreen (QT_QPA_PLATFORM=offscreen), selects the first divergence and writes the
// PNG and/or a bug-report bundle. Exit codes: 0 clean, 1 divergent, 2 input error (message
// on stderr), 3 internal error.
#pragma once

#include <QSize>
#include <QString>
#include <QList>
#include <QStringList>

#include <memory>

#include <vector>

#include "kvscope/FaultSpec.hpp"
#include "ui/EngineController.hpp"

class QCommandLineParser;

namespace kvscope::ui {

struct HeadlessOptions {
  bool audit = false;            // --audit: headless mode
  bool synthetic = false;        // --synthetic: built-in synthetic data instead of an audit
  bool syntheticClean = false;   // --synthetic-clean: ... without planted faults
  QList<int> syntheticShape;     // --synthetic-shape LxHxTxD (layers, kv heads, positions, dim)
  QString modelDir;
  QString traceFile;
  QString referenceTraceFile;
  QStringList prompts;
  int maxNew = 16;
  double temperature = 0.0;
  int topK = 0;
  double topP = 1.0;
  qulonglong seed = 0;
  QStringList faults;
  QString exportPng;
  QString exportBundle;
  bool selectDivergence = false;
  QSize size = QSize(1680, 1050);
};

class HeadlessController {
 public:
  enum ExitCode { Clean = 0, Divergent = 1, InputError = 2, InternalError = 3 };

  /// Declares every command-line option (GUI and headless share them).
  static void addOptions(QCommandLineParser& parser);
  /// Reads the options; false with `error` for malformed values.
  static bool read(const QCommandLineParser& parser, HeadlessOptions* options, QString* error);
  /// The job spec the options describe.
  static AuditJobSpec specFor(const HeadlessOptions& options);
  /// The synthetic output the --synthetic* options describe.
  static std::shared_ptr<const AuditJobOutput> syntheticOutput(const HeadlessOptions& options);

  /// Runs headless mode; prints the headline and written files, errors on stderr.
  static int run(const HeadlessOptions& options, EngineController::AuditJobFunction job,
                 std::vector<FaultInfo> catalog);
};

}  // namespace kvscope::ui
