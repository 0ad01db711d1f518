// kvscope: the KV Scope desktop inspector. Interactive by default (the command line fills
// in the run setup and the faults; --run starts the audit at once); with --audit it runs
// headless (see HeadlessController) and exits 0 clean, 1 divergent, 2 input error.
#include <QApplication>
#include <QCommandLineParser>
#include <QTextStream>

#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  // Headless mode renders offscreen unless the caller chose a platform.
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--audit") == 0 && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
      qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("KVScope"));
  QApplication::setApplicationName(QStringLiteral("kvscope"));
  QApplication::setApplicationDisplayName(QStringLiteral("KV Scope"));
  QApplication::setApplicationVersion(QStringLiteral(KVSCOPE_UI_VERSION));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("KV Scope: audit cached LLM generation against an uncached reference."));
  parser.addHelpOption();
  parser.addVersionOption();
  kvscope::ui::HeadlessController::addOptions(parser);
  if (!parser.parse(QApplication::arguments())) {
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
  return app.exec();
}
