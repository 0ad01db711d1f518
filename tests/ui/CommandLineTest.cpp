// The command line and the run setup around it: --arrival parsing and validation (options
// and the "Arrival ticks" field), interactive mode filling in the setup and fault panels
// and starting the audit with --run (an injected fake job), --select-finding selecting a
// finding's request/step/layer, and trace+trace outputs without references still showing
// the reference side (built from the reference trace on the engine thread).
#include <QCommandLineParser>
#include <QLabel>
#include <QLineEdit>
#include <QSettings>
#include <QTableView>
#include <QtTest>
#include <atomic>
#include <mutex>

#include "TestAudit.hpp"
#include "ui/bridge/HeadlessController.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/bridge/SelectionContext.hpp"
#include "ui/panels/DiagnosisPanel.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/views/HeadlineView.hpp"
#include "ui/views/KvHeatmapView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

std::vector<FaultInfo> testCatalog() {
  return {{"wrong_layer",
           "layer L reads layer S's cache",
           "layer 1 matches, layer 2 differs",
           {{"layer", "reader", "1"}, {"source", "source", "0"}, {"step", "first step", "0"}}},
          {"cross_request",
           "request R writes into V's cache",
           "a batch row changes when another request arrives",
           {{"request", "writer", "1"}, {"victim", "victim", "0"}}}};
}

// Parses a command line the way main() does.
bool parse(const QStringList& args, HeadlessOptions* options, QString* error) {
  QCommandLineParser parser;
  HeadlessController::addOptions(parser);
  if (!parser.parse(QStringList{QStringLiteral("kvscope")} + args)) {
    *error = parser.errorText();
    return false;
  }
  return HeadlessController::read(parser, options, error);
}

const Finding* findingById(const AuditJobOutput& out, const std::string& id) {
  for (const auto& f : out.result.report.findings)
    if (f.id == id) return &f;
  return nullptr;
}

}  // namespace

class CommandLineTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { QSettings().clear(); }

  void samplingOptionsFollowTheCliRule() {
    HeadlessOptions o;
    QString error;
    QVERIFY2(parse({QStringLiteral("--temperature"), QStringLiteral("0.7"),
                    QStringLiteral("--top-k"), QStringLiteral("5"), QStringLiteral("--top-p"),
                    QStringLiteral("0.9"), QStringLiteral("--seed"), QStringLiteral("3")},
                   &o, &error),
             qPrintable(error));
    const AuditJobSpec spec = HeadlessController::specFor(o);
    QCOMPARE(spec.policy.topK.value_or(0), int64_t(5));
    QCOMPARE(spec.policy.topP.value_or(0.0), 0.9);
    QCOMPARE(spec.policy.seed, uint64_t(3));
    o = {};
    QVERIFY(parse({}, &o, &error));
    QVERIFY(!HeadlessController::specFor(o).policy.topK &&
            !HeadlessController::specFor(o).policy.topP);
    for (const QStringList& bad :
         {QStringList{QStringLiteral("--top-k"), QStringLiteral("0")},
          QStringList{QStringLiteral("--top-p"), QStringLiteral("0")},
          QStringList{QStringLiteral("--top-p"), QStringLiteral("2")},
          QStringList{QStringLiteral("--temperature"), QStringLiteral("warm")}}) {
      o = {};
      error.clear();
      QVERIFY2(!parse(bad, &o, &error), qPrintable(bad.join(QLatin1Char(' '))));
      QVERIFY2(!error.isEmpty(), qPrintable(bad.join(QLatin1Char(' '))));
    }
  }

  void weightsVersionsReachTheSpecAndTheSetupPanel() {
    HeadlessOptions o;
    QString error;
    QVERIFY2(parse({QStringLiteral("--model"), QStringLiteral("/m/v0"),
                    QStringLiteral("--weights-version"), QStringLiteral("1=/m/v1"),
                    QStringLiteral("--weights-version"), QStringLiteral("2=/m/v2")},
                   &o, &error),
             qPrintable(error));
    const AuditJobSpec spec = HeadlessController::specFor(o);
    QCOMPARE(spec.options.weightsDirectories,
             (std::map<uint64_t, std::string>{{1, "/m/v1"}, {2, "/m/v2"}}));
    for (const QStringList& bad :
         {QStringList{QStringLiteral("--model"), QStringLiteral("/m"),
                      QStringLiteral("--weights-version"), QStringLiteral("0=/m")},
          QStringList{QStringLiteral("--weights-version"), QStringLiteral("1=/m/v1")},
          QStringList{QStringLiteral("--model"), QStringLiteral("/m"),
                      QStringLiteral("--weights-version"), QStringLiteral("x")}}) {
      o = {};
      error.clear();
      QVERIFY2(!parse(bad, &o, &error), qPrintable(bad.join(QLatin1Char(' '))));
      QVERIFY2(error.contains(QStringLiteral("--weights-version")), qPrintable(error));
    }
    RunSetupPanel panel;
    panel.setSpec(spec);
    QVERIFY(panel.validate(&error));
    QCOMPARE(panel.spec().options.weightsDirectories, spec.options.weightsDirectories);
    panel.setModelDir(QString());
    QVERIFY(!panel.validate(&error));
    QVERIFY2(error.contains(QStringLiteral("needs a model")), qPrintable(error));
  }

  void arrivalOptionsParseAndValidate() {
    HeadlessOptions o;
    QString error;
    QVERIFY2(parse({QStringLiteral("--prompt"), QStringLiteral("A"), QStringLiteral("--prompt"),
                    QStringLiteral("B"), QStringLiteral("--arrival"), QStringLiteral("0"),
                    QStringLiteral("--arrival"), QStringLiteral("3")},
                   &o, &error),
             qPrintable(error));
    QCOMPARE(o.arrivals, (QList<qlonglong>{0, 3}));
    const AuditJobSpec spec = HeadlessController::specFor(o);
    QCOMPARE(spec.arrivalTicks, (std::vector<int64_t>{0, 3}));
    QCOMPARE(spec.prompts, (std::vector<std::string>{"A", "B"}));

    // One tick for two prompts: the second arrives at 0.
    o = {};
    QVERIFY(parse({QStringLiteral("--prompt"), QStringLiteral("A"), QStringLiteral("--prompt"),
                   QStringLiteral("B"), QStringLiteral("--arrival"), QStringLiteral("2")},
                  &o, &error));
    QCOMPARE(HeadlessController::specFor(o).arrivalTicks, (std::vector<int64_t>{2}));

    for (const QStringList& bad :
         {QStringList{QStringLiteral("--prompt"), QStringLiteral("A"), QStringLiteral("--arrival"),
                      QStringLiteral("-1")},
          QStringList{QStringLiteral("--prompt"), QStringLiteral("A"), QStringLiteral("--arrival"),
                      QStringLiteral("soon")},
          QStringList{QStringLiteral("--prompt"), QStringLiteral("A"), QStringLiteral("--arrival"),
                      QStringLiteral("0"), QStringLiteral("--arrival"), QStringLiteral("3")}}) {
      o = {};
      error.clear();
      QVERIFY2(!parse(bad, &o, &error), qPrintable(bad.join(QLatin1Char(' '))));
      QVERIFY2(error.contains(QStringLiteral("--arrival")), qPrintable(error));
    }

    o = {};
    QVERIFY(parse({QStringLiteral("--select-finding"), QStringLiteral("cross_request"),
                   QStringLiteral("--run")},
                  &o, &error));
    QCOMPARE(o.selectFinding, QStringLiteral("cross_request"));
    QVERIFY(o.run);
  }

  void arrivalFieldParsesValidatesAndFeedsTheSpec() {
    std::vector<int64_t> ticks;
    QString error;
    QVERIFY(RunSetupPanel::parseArrivalTicks(QStringLiteral("0, 3"), &ticks, &error));
    QCOMPARE(ticks, (std::vector<int64_t>{0, 3}));
    QVERIFY(RunSetupPanel::parseArrivalTicks(QStringLiteral("  4 7;9 "), &ticks, &error));
    QCOMPARE(ticks, (std::vector<int64_t>{4, 7, 9}));
    QVERIFY(RunSetupPanel::parseArrivalTicks(QString(), &ticks, &error));
    QVERIFY(ticks.empty());
    QVERIFY(!RunSetupPanel::parseArrivalTicks(QStringLiteral("0, -2"), &ticks, &error));
    QVERIFY(error.contains(QStringLiteral("-2")));
    QVERIFY(!RunSetupPanel::parseArrivalTicks(QStringLiteral("0, x"), &ticks, &error));
    QCOMPARE(RunSetupPanel::formatArrivalTicks({0, 3}), QStringLiteral("0, 3"));

    RunSetupPanel panel;
    panel.show();
    AuditJobSpec in;
    in.modelDir = "/models/demo";
    in.prompts = {"first", "second"};
    in.arrivalTicks = {0, 3};
    in.maxNewTokens = 12;
    in.policy.temperature = 0.5;
    in.policy.topK = 7;
    in.policy.seed = 42;
    panel.setSpec(in);
    QCOMPARE(panel.arrivalText(), QStringLiteral("0, 3"));
    QVERIFY(panel.validate(&error));
    const AuditJobSpec out = panel.spec();
    QCOMPARE(out.modelDir, in.modelDir);
    QCOMPARE(out.prompts, in.prompts);
    QCOMPARE(out.arrivalTicks, in.arrivalTicks);
    QCOMPARE(out.maxNewTokens, int64_t(12));
    QCOMPARE(out.policy.temperature, 0.5);
    QCOMPARE(out.policy.topK.value_or(0), int64_t(7));
    QCOMPARE(out.policy.seed, uint64_t(42));

    // Typing a bad value marks the field and explains; three ticks for two prompts too.
    auto* errorLabel = panel.findChild<QLabel*>(QStringLiteral("arrivalError"));
    QVERIFY(errorLabel);
    QTest::keyClicks(panel.arrivalEdit(), QStringLiteral(", x"));
    QVERIFY(!panel.validate(&error));
    QVERIFY(errorLabel->isVisible());
    QVERIFY(errorLabel->text().contains(QStringLiteral("'x'")));
    panel.setArrivalTicks({0, 1, 2});
    QVERIFY(!panel.validate(&error));
    QVERIFY(error.contains(QStringLiteral("3 ticks for 2 prompt")));
    panel.setArrivalTicks({5});
    QVERIFY(panel.validate(&error));
    QVERIFY(!errorLabel->isVisible());
  }

  void runRefusesBadArrivalTicks() {
    std::atomic<int> calls{0};
    InspectorWindow window(
        [&](const AuditJobSpec&) {
          ++calls;
          return *test::makeTestOutput();
        },
        testCatalog());
    window.show();
    window.setup()->setModelDir(QStringLiteral("/models/tiny"));
    window.setup()->setPrompts({QStringLiteral("only one")});
    window.setup()->arrivalEdit()->setText(QStringLiteral("0, 3"));
    QVERIFY(!window.runAudit());
    QVERIFY(window.headline()->headline().startsWith(QStringLiteral("Input error: arrival ticks")));
    QVERIFY(window.engine()->isIdle());
    QCOMPARE(calls.load(), 0);
  }

  void interactiveRunFillsThePanelsAndStartsTheJob() {
    QTemporaryDir model;
    std::mutex m;
    AuditJobSpec seen;
    std::atomic<int> calls{0};
    InspectorWindow window(
        [&](const AuditJobSpec& spec) {
          {
            std::lock_guard<std::mutex> lock(m);
            seen = spec;
          }
          ++calls;
          return *test::makeTestOutput();
        },
        testCatalog());
    HeadlessOptions o;
    QString error;
    QVERIFY(parse(
        {QStringLiteral("--model"), model.path(), QStringLiteral("--prompt"), QStringLiteral("A"),
         QStringLiteral("--prompt"), QStringLiteral("B"), QStringLiteral("--arrival"),
         QStringLiteral("0"), QStringLiteral("--arrival"), QStringLiteral("3"),
         QStringLiteral("--max-new"), QStringLiteral("12"), QStringLiteral("--fault"),
         QStringLiteral("wrong_layer:layer=2,source=1"), QStringLiteral("--fault"),
         QStringLiteral("cross_request:request=1,victim=0"), QStringLiteral("--select-finding"),
         QStringLiteral("cross_request"), QStringLiteral("--run")},
        &o, &error));
    QSignalSpy succeeded(window.controller(), &InspectorController::auditSucceeded);
    QVERIFY2(HeadlessController::startInteractive(window, o, &error), qPrintable(error));
    QVERIFY(window.isVisible());
    // The panels show what the command line asked for.
    QCOMPARE(window.setup()->modelDir(), QFileInfo(model.path()).absoluteFilePath());
    QCOMPARE(window.setup()->arrivalText(), QStringLiteral("0, 3"));
    QCOMPARE(window.faults()->specs(),
             (QStringList{QStringLiteral("wrong_layer:layer=2,source=1,step=0"),
                          QStringLiteral("cross_request:request=1,victim=0")}));
    QCOMPARE(window.recentFiles().first(), QFileInfo(model.path()).absoluteFilePath());
    // --run: the job runs on the engine thread with that spec.
    QTRY_VERIFY_WITH_TIMEOUT(succeeded.count() == 1, 10000);
    QCOMPARE(calls.load(), 1);
    {
      std::lock_guard<std::mutex> lock(m);
      QCOMPARE(seen.prompts, (std::vector<std::string>{"A", "B"}));
      QCOMPARE(seen.arrivalTicks, (std::vector<int64_t>{0, 3}));
      QCOMPARE(seen.maxNewTokens, int64_t(12));
      QCOMPARE(seen.faults, (std::vector<std::string>{"wrong_layer:layer=2,source=1,step=0",
                                                      "cross_request:request=1,victim=0"}));
    }
    // --select-finding applied once the audit finished.
    QVERIFY(window.controller()->waitUntilSettled(10000));
    const Finding* f = findingById(*window.context()->output(), "cross_request");
    QVERIFY(f);
    QCOMPARE(window.context()->selection().request, f->request);
    QCOMPARE(window.context()->selection().step, f->step);
    QCOMPARE(window.context()->selection().layer, f->layer);
  }

  void interactiveModeRejectsUnknownFaults() {
    InspectorWindow window(nullptr, testCatalog());
    HeadlessOptions o;
    o.faults = {QStringLiteral("wrong_layer:layer=2,colour=3")};
    QString error;
    QVERIFY(!HeadlessController::startInteractive(window, o, &error));
    QVERIFY2(error.contains(QStringLiteral("no parameter 'colour'")), qPrintable(error));
    o.faults = {QStringLiteral("no_such_fault")};
    QVERIFY(!HeadlessController::startInteractive(window, o, &error));
    QVERIFY2(error.contains(QStringLiteral("unknown fault 'no_such_fault'")), qPrintable(error));
    QVERIFY(window.faults()->specs().isEmpty());
  }

  void selectFindingSelectsItsRequestStepAndLayer() {
    InspectorWindow window(nullptr, {});
    window.resize(1600, 1000);
    window.show();
    const auto output = test::makeTestOutput();
    window.showOutput(output);
    QVERIFY(window.controller()->waitUntilSettled(10000));
    QCOMPARE(window.context()->selection().request, int64_t(0));  // the first divergence

    const Finding* cross = findingById(*output, "cross_request");
    QVERIFY(cross);
    QString error;
    QVERIFY2(window.selectFinding(QStringLiteral("cross_request"), &error), qPrintable(error));
    QVERIFY(window.controller()->waitUntilSettled(10000));
    const InspectionPoint s = window.context()->selection();
    QCOMPARE(s.request, cross->request);
    QCOMPARE(s.step, cross->step);
    QCOMPARE(s.layer, cross->layer);
    QCOMPARE(window.diagnosis()->findingsView()->currentIndex().row(),
             window.diagnosis()->findingRow(QStringLiteral("cross_request")));
    QVERIFY(window.diagnosis()->evidenceText().contains(QStringLiteral("cross_request")));
    QCOMPARE(window.heatmaps()->cachedView()->positions(),
             window.context()->snapshot()->cachedPositions);

    // By row, and a finding that does not exist.
    QVERIFY(window.selectFinding(QStringLiteral("0"), &error));
    QCOMPARE(window.context()->selection().request, output->result.report.findings[0].request);
    QCOMPARE(window.context()->selection().step, output->result.report.findings[0].step);
    QVERIFY(!window.selectFinding(QStringLiteral("stale_cache"), &error));
    QVERIFY2(error.contains(QStringLiteral("wrong_layer")) &&
                 error.contains(QStringLiteral("cross_request")),
             qPrintable(error));
  }
};

QTEST_MAIN(CommandLineTest)
#include "CommandLineTest.moc"
