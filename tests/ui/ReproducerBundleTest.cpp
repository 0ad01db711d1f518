// The minimal reproducer in the GUI (issue 15), driving the real window offscreen on the
// real demo audit (TestAudit.hpp): Audit → "Minimize trace for a bug report…" is enabled
// only after an audit with a finding, writes the minimized trace through the engine thread,
// and the bug-report bundle holds minimized.kvtrace, reproduce.sh and, in summary.md, the
// same kvscope-cli command `audit --export-bundle` prints; the minimized traces audit to the
// same first finding (id, request, step, layer).
#include <QAction>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>
#include <QMenuBar>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "TestAudit.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceMinimizer.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/panels/InspectorWindow.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

QString readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// The first root finding of auditing `trace` with the test's model, as the reproducer does.
MinimizeTarget reaudit(const QString& trace) {
  AuditJobSpec spec;
  spec.modelDir = test::demoModelDir();
  spec.traceFile = trace.toStdString();
  const auto target = minimizeTarget(runAuditJob(spec).result.report);
  if (!target) throw std::runtime_error("the minimized trace audits clean");
  return *target;
}

bool sameFinding(const MinimizeTarget& a, const MinimizeTarget& b) {
  return a.finding.id == b.finding.id && a.finding.request == b.finding.request &&
         a.finding.step == b.finding.step && a.finding.layer == b.finding.layer &&
         a.first.step == b.first.step && a.first.layer == b.first.layer;
}

}  // namespace

class ReproducerBundleTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;
  QTemporaryDir dir_;
  MinimizeTarget original_;

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    window_ = std::make_unique<InspectorWindow>(nullptr, std::vector<FaultInfo>{});
    window_->resize(1400, 900);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    window_->exporter()->setOverwritePolicy(ExportController::OverwritePolicy::Refuse);
    const auto target = minimizeTarget(test::makeTestOutput()->result.report);
    QVERIFY(target);
    original_ = *target;
    QCOMPARE(QString::fromStdString(original_.finding.id), QStringLiteral("wrong_layer"));
  }

  void cleanupTestCase() { window_.reset(); }

  void actionIsEnabledOnlyWithAFinding() {
    QAction* a = window_->minimizeAction();
    QVERIFY(a);
    QVERIFY(!a->isEnabled());  // nothing audited yet
    bool inAuditMenu = false;
    for (QAction* menu : window_->menuBar()->actions())
      if (menu->text() == QStringLiteral("&Audit") && menu->menu())
        inAuditMenu = menu->menu()->actions().contains(a);
    QVERIFY(inAuditMenu);
    window_->showOutput(test::makeCleanOutput(), test::testAuditSpec({}));
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    QVERIFY(!a->isEnabled());
    // Without the inputs (an output shown without its spec), nothing can be re-audited.
    window_->showOutput(test::makeTestOutput());
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    QVERIFY(!a->isEnabled());
    window_->showOutput(test::makeTestOutput(), test::testAuditSpec());
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    QVERIFY(a->isEnabled());
  }

  void minimizeWritesASmallerTraceWithTheSameFinding() {
    const QString path = dir_.filePath(QStringLiteral("min.kvtrace"));
    QString command;
    QVERIFY2(window_->minimizeTrace(path, &command), qPrintable(command));
    QVERIFY(QFileInfo::exists(path));
    QVERIFY2(command.startsWith(QStringLiteral("kvscope-cli audit --model ")), qPrintable(command));
    QVERIFY2(command.contains(QStringLiteral("--trace ") + QFileInfo(path).absoluteFilePath()),
             qPrintable(command));
    const Trace small = TraceFile::read(path.toStdString());
    const Trace& full = test::makeTestOutput()->result.trace;
    QVERIFY(small.steps.size() < full.steps.size());
    QVERIFY(small.layerIndices().size() < full.layerIndices().size());  // layers cut too
    QVERIFY(sameFinding(reaudit(path), original_));
  }

  void bundleHoldsTheMinimizedTraceAndTheCommand() {
    const QString bundle = dir_.filePath(QStringLiteral("bundle"));
    const ExportOutcome out = window_->exportBundle(bundle);
    QVERIFY2(out.ok, qPrintable(out.error));
    const QDir d(bundle);
    QCOMPARE(d.entryList(QDir::Files, QDir::Name),
             (QStringList{QStringLiteral("minimized.kvtrace"), QStringLiteral("report.json"),
                          QStringLiteral("reproduce.sh"), QStringLiteral("screenshot.png"),
                          QStringLiteral("summary.md")}));
    QVERIFY(out.written.contains(d.filePath(QStringLiteral("minimized.kvtrace"))));
    // The command kvscope-cli audit --export-bundle writes: absolute inputs, the trace
    // named from the bundle folder (one function builds it for both front ends).
    const std::string command =
        reproduceCommand(withAbsolutePaths(test::testAuditSpec()), "minimized.kvtrace");
    const QString md = readAll(d.filePath(QStringLiteral("summary.md")));
    QVERIFY2(md.contains(QStringLiteral("## Minimal reproducer")), qPrintable(md));
    QVERIFY2(md.contains(QString::fromStdString(command)), qPrintable(md));
    QVERIFY(md.contains(QStringLiteral("--trace minimized.kvtrace")));
    const QJsonObject json =
        QJsonDocument::fromJson(readAll(d.filePath(QStringLiteral("report.json"))).toUtf8())
            .object();
    const QJsonObject minimized = json.value(QStringLiteral("minimized")).toObject();
    QCOMPARE(minimized.value(QStringLiteral("command")).toString(),
             QString::fromStdString(command));
    QVERIFY(minimized.value(QStringLiteral("bytes_after")).toDouble() <
            minimized.value(QStringLiteral("bytes_before")).toDouble() / 2);
    QVERIFY(readAll(d.filePath(QStringLiteral("reproduce.sh")))
                .contains(QStringLiteral("minimized.kvtrace")));
    QVERIFY(QFileInfo(d.filePath(QStringLiteral("reproduce.sh"))).isExecutable());
    QVERIFY(sameFinding(reaudit(d.filePath(QStringLiteral("minimized.kvtrace"))), original_));
    // A second bundle into the same folder is refused, the minimized trace included.
    const qint64 size = QFileInfo(d.filePath(QStringLiteral("minimized.kvtrace"))).size();
    const ExportOutcome again = window_->exportBundle(bundle);
    QVERIFY(!again.ok);
    QCOMPARE(QFileInfo(d.filePath(QStringLiteral("minimized.kvtrace"))).size(), size);
  }

  void cleanAuditBundleHasNoReproducer() {
    window_->showOutput(test::makeCleanOutput(), test::testAuditSpec({}));
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    const QString bundle = dir_.filePath(QStringLiteral("clean-bundle"));
    const ExportOutcome out = window_->exportBundle(bundle);
    QVERIFY2(out.ok, qPrintable(out.error));
    QVERIFY(!QFileInfo::exists(QDir(bundle).filePath(QStringLiteral("minimized.kvtrace"))));
    // The bundle says why it holds no minimized trace (issue 27, item 13).
    const QString md = readAll(QDir(bundle).filePath(QStringLiteral("summary.md")));
    QVERIFY2(md.contains(QStringLiteral("## Minimal reproducer")) &&
                 md.contains(QStringLiteral("the audit is clean")),
             qPrintable(md));
    const QJsonObject json =
        QJsonDocument::fromJson(readAll(QDir(bundle).filePath(QStringLiteral("report.json"))).toUtf8())
            .object();
    QVERIFY(json.value(QStringLiteral("minimized_absent")).toString().contains(QStringLiteral("clean")));
    QString message;
    QVERIFY(!window_->minimizeTrace(dir_.filePath(QStringLiteral("none.kvtrace")), &message));
    QVERIFY(!message.isEmpty());
  }

  // Issue 27, item 13: reproduce.sh finds kvscope-cli beside the program that wrote it (no
  // $KVSCOPE_CLI, none on PATH), and says what to set when there is none.
  void reproduceScriptFindsTheCliBesideItsWriter() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString fake = dir.filePath(QStringLiteral("bin dir/kvscope-cli"));
    QVERIFY(QDir().mkpath(QFileInfo(fake).absolutePath()));
    QFile f(fake);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("#!/bin/sh\necho \"ran in $(basename \"$PWD\"): $*\"\n");
    f.close();
    f.setPermissions(f.permissions() | QFileDevice::ExeOwner);
    QVERIFY(QDir().mkpath(dir.filePath(QStringLiteral("bundle"))));
    auto run = [&](const std::string& beside, int* code) {
      const QString sh = dir.filePath(QStringLiteral("bundle/reproduce.sh"));
      QFile script(sh);
      if (!script.open(QIODevice::WriteOnly)) return QString();
      script.write(QByteArray::fromStdString(
          reproduceScript("kvscope-cli audit --trace minimized.kvtrace", beside)));
      script.close();
      QProcess p;
      QProcessEnvironment env;
      env.insert(QStringLiteral("PATH"), QStringLiteral("/usr/bin:/bin"));  // no kvscope-cli
      p.setProcessEnvironment(env);
      p.setProcessChannelMode(QProcess::MergedChannels);
      p.start(QStringLiteral("/bin/sh"), {sh, QStringLiteral("--json")});
      p.waitForFinished(10000);
      *code = p.exitCode();
      return QString::fromUtf8(p.readAll());
    };
    int code = -1;
    QString said = run(fake.toStdString(), &code);
    QCOMPARE(code, 0);
    QCOMPARE(said.trimmed(), QStringLiteral("ran in bundle: audit --trace minimized.kvtrace --json"));
    said = run(dir.filePath(QStringLiteral("nowhere/kvscope-cli")).toStdString(), &code);
    QCOMPARE(code, 127);
    QVERIFY2(said.contains(QStringLiteral("set KVSCOPE_CLI=")) &&
                 said.contains(QStringLiteral("not on PATH")),
             qPrintable(said));
    // The GUI's bundle names the kvscope-cli beside it.
    QVERIFY(ExportController::cliBesideThisProgram().endsWith(QStringLiteral("/kvscope-cli")));
  }
};

QTEST_MAIN(ReproducerBundleTest)
#include "ReproducerBundleTest.moc"
