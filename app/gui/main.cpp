// kvscope: the KV Scope desktop inspector. Interactive by default (the command line fills
// in the run setup and the faults; --run starts the audit at once); with --audit it runs
// headless (see HeadlessController) and exits 0 clean, 1 divergent, 2 input error.
// --help and --version need no display: they run under a QCoreApplication. Without a
// display (and no QT_QPA_PLATFORM) the window is refused with exit 2 and a message, not
// Qt's abort.
#include <QApplication>
#include <QCommandLineParser>
#include <QTextStream>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>

#include "kvscope/AuditJob.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "ui/bridge/HeadlessController.hpp"
#include "ui/panels/InspectorWindow.hpp"

namespace {

kvscope::ui::EngineController::AuditJobFunction auditJob() {
  return [](const kvscope::AuditJobSpec& spec) { return kvscope::runAuditJob(spec); };
}

std::vector<kvscope::FaultInfo> faultCatalog() { return kvscope::FaultSpec::catalog(); }

bool hasArgument(int argc, char** argv, std::initializer_list<const char*> names) {
  for (int i = 1; i < argc; ++i)
    for (const char* n : names)
      if (std::strcmp(argv[i], n) == 0) return true;
  return false;
}

// What QCommandLineParser answers without running anything (addHelpOption, addVersionOption).
bool onlyHelpOrVersion(int argc, char** argv) {
  return hasArgument(argc, argv, {"-h", "--help", "-?", "--help-all", "-v", "--version"});
}

// Linux without X11 or Wayland and no platform chosen: QApplication would abort (qFatal).
bool noDisplay(int argc, char** argv) {
#if defined(Q_OS_LINUX)
  const auto empty = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr || *v == '\0';
  };
  return empty("QT_QPA_PLATFORM") && empty("DISPLAY") && empty("WAYLAND_DISPLAY") &&
         !hasArgument(argc, argv, {"-platform", "--platform"});
#else
  (void)argc;
  (void)argv;
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // Headless mode renders offscreen unless the caller chose a platform.
  if (hasArgument(argc, argv, {"--audit"}) && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  const bool infoOnly = onlyHelpOrVersion(argc, argv);
  if (!infoOnly && noDisplay(argc, argv)) {
    QTextStream(stderr) << "kvscope: no display to open the window on (DISPLAY and WAYLAND_DISPLAY "
                           "are unset); run with --audit for a headless audit, set "
                           "QT_QPA_PLATFORM=offscreen, or use kvscope-cli (audit, inspect)"
                        << Qt::endl;
    return kvscope::ui::HeadlessController::InputError;
  }
  QCoreApplication::setOrganizationName(QStringLiteral("KVScope"));
  QCoreApplication::setApplicationName(QStringLiteral("kvscope"));
  QCoreApplication::setApplicationVersion(QStringLiteral(KVSCOPE_UI_VERSION));
  // --help and --version print and exit: no GUI (and no display) needed for them.
  std::unique_ptr<QCoreApplication> app = infoOnly
                                              ? std::make_unique<QCoreApplication>(argc, argv)
                                              : std::make_unique<QApplication>(argc, argv);
  if (!infoOnly) QApplication::setApplicationDisplayName(QStringLiteral("KV Scope"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("KV Scope: audit cached LLM generation against an uncached reference."));
  parser.addHelpOption();
  parser.addVersionOption();
  kvscope::ui::HeadlessController::addOptions(parser);
  if (!parser.parse(QCoreApplication::arguments())) {
    QTextStream(stderr) << "kvscope: " << parser.errorText() << Qt::endl;
    return kvscope::ui::HeadlessController::InputError;
  }
  if (parser.isSet(QStringLiteral("help"))) parser.showHelp(0);
  if (parser.isSet(QStringLiteral("version"))) parser.showVersion();
  if (!parser.positionalArguments().isEmpty()) {
    QTextStream(stderr) << "kvscope: unexpected argument '" << parser.positionalArguments().first() << "'" << Qt::endl;
    return kvscope::ui::HeadlessController::InputError;
  }
  kvscope::ui::HeadlessOptions options;
  QString error;
  if (!kvscope::ui::HeadlessController::read(parser, &options, &error)) {
    QTextStream(stderr) << "kvscope: " << error << Qt::endl;
    return kvscope::ui::HeadlessController::InputError;
  }
  if (options.audit) return kvscope::ui::HeadlessController::run(options, auditJob(), faultCatalog());

  kvscope::ui::InspectorWindow window(auditJob(), faultCatalog());
  if (!kvscope::ui::HeadlessController::startInteractive(window, options, &error)) {
    QTextStream(stderr) << "kvscope: " << error << Qt::endl;
    return kvscope::ui::HeadlessController::InputError;
  }
  return app->exec();
}
