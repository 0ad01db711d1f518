// The command line of `kvscope`, shared by both modes.
//  - `kvscope --audit ... --export-png OUT.png`: runs the audit synchronously, renders the
//    same window offscreen (QT_QPA_PLATFORM=offscreen), selects the first divergence (or
//    --select-finding ID) and writes the PNG and/or a bug-report bundle. Exit codes: 0 clean,
//    1 divergent, 2 input error (message on stderr), 3 internal error.
//  - `kvscope --model DIR --prompt ... --fault SPEC ... [--run]`: opens the window with the
//    run setup and the fault panel filled in from the command line; --run starts the audit
//    on the engine thread at once.
#pragma once

#include <QSize>
#include <QString>
#include <QList>
#include <QStringList>

#include <memory>

#include <vector>

#include "kvscope/FaultSpec.hpp"
#include "ui/bridge/EngineController.hpp"

class QCommandLineParser;

namespace kvscope::ui {

class InspectorWindow;

struct HeadlessOptions {
  bool audit = false;  // --audit: headless mode
  QString modelDir;
  QString traceFile;
  QString referenceTraceFile;
  QStringList weightsVersions;  // --weights-version N=DIR
  QStringList prompts;
  QList<qlonglong> arrivals;  // --arrival TICK, one per prompt (missing: tick 0)
  int maxNew = 16;
  double temperature = 0.0;
  int topK = 0;
  double topP = 1.0;
  qulonglong seed = 0;
  QStringList faults;
  QString exportPng;
  QString exportBundle;
  bool selectDivergence = false;
  QString selectFinding;  // --select-finding ID (a finding id or its 0-based row)
  bool run = false;       // --run: interactive mode starts the audit at once
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
  /// Fills the window's run setup and fault panel from the options; false with `error`
  /// for a fault the panel's catalog does not know.
  static bool configure(InspectorWindow& window, const HeadlessOptions& options, QString* error);
  /// Interactive mode: configure(), show the window and,
  /// with --run, start the audit; --select-finding then applies when it finishes.
  static bool startInteractive(InspectorWindow& window, const HeadlessOptions& options,
                               QString* error);

  /// Runs headless mode; prints the headline and written files, errors on stderr.
  static int run(const HeadlessOptions& options, EngineController::AuditJobFunction job,
                 std::vector<FaultInfo> catalog);
};

}  // namespace kvscope::ui
