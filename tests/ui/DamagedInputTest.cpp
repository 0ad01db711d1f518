// Issue 12: the GUI opens a damaged trace or checkpoint, says what is wrong with which file
// and which field, and keeps working. Driven through the real window offscreen with the real
// engine: a truncated trace, a checkpoint whose model.safetensors is truncated, and a
// config.json with a field of the wrong type, each opened and run (Ctrl+R); the error is in
// the banner (the app shows input errors there, no dialog), an audit of the intact demo
// checkpoint then runs and shows its verdict, and no damaged file was written to.
#include <QFile>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>

#include "TestAudit.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/FaultSpec.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/RunSetupPanel.hpp"
#include "ui/views/HeadlineView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

QByteArray bytesOf(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeBytes(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  QCOMPARE(f.write(bytes), bytes.size());
}

/// A copy of the demo checkpoint in `dir`/`name`.
QString copyOfDemo(const QTemporaryDir& dir, const QString& name) {
  const std::filesystem::path to = dir.filePath(name).toStdString();
  std::filesystem::copy(test::demoModelDir(), to, std::filesystem::copy_options::recursive);
  return QString::fromStdString(to.string());
}

/// What a user types into the setup: two prompts on `model`, the second arriving later.
AuditJobSpec typedSpec(const std::string& model) {
  AuditJobSpec spec;
  spec.modelDir = model;
  spec.prompts = {"The cache must hold one record per layer.", "A second request."};
  spec.arrivalTicks = {0, 3};
  spec.maxNewTokens = 6;
  return spec;
}

}  // namespace

class DamagedInputTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;
  QTemporaryDir dir_;

  // Runs what the setup describes (Ctrl+R), waits for it to fail with an input error and
  // gives the banner.
  void runAndExpectInputError(QString* shown) {
    QSignalSpy failed(window_->controller(), &InspectorController::auditFailed);
    QSignalSpy succeeded(window_->controller(), &InspectorController::auditSucceeded);
    QVERIFY2(window_->runAudit(), qPrintable(window_->headline()->headline()));  // Ctrl+R
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() + succeeded.count() == 1, 30000);
    QCOMPARE(succeeded.count(), 0);
    QVERIFY(failed.at(0).at(1).toBool());  // an input error, not an internal one
    *shown = window_->headline()->headline();
    QVERIFY2(shown->startsWith(QStringLiteral("Input error:")), qPrintable(*shown));
  }

  // Then an audit of the intact demo checkpoint (the test requests, no faults) runs and
  // shows its verdict.
  void validAuditStillRuns() {
    window_->setup()->setSpec(typedSpec(test::demoModelDir()));
    window_->setup()->setTraceFile(QString());
    QSignalSpy succeeded(window_->controller(), &InspectorController::auditSucceeded);
    QVERIFY2(window_->runAudit(), qPrintable(window_->headline()->headline()));
    QTRY_VERIFY_WITH_TIMEOUT(succeeded.count() == 1, 30000);
    QVERIFY(window_->controller()->waitUntilSettled(20000));
    const QString shown = window_->headline()->headline();
    QVERIFY2(shown.startsWith(QStringLiteral("Clean: cached generation matches")),
             qPrintable(shown));
    QVERIFY(window_->isVisible());
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void init() {
    QSettings().clear();
    window_ = std::make_unique<InspectorWindow>(
        [](const AuditJobSpec& spec) { return runAuditJob(spec); }, FaultSpec::catalog());
    window_->resize(1366, 768);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
  }

  void cleanup() { window_.reset(); }

  void aTruncatedTrace() {
    // A real trace of the test audit, cut short.
    AuditJobSpec record = test::testAuditSpec();
    const QString whole = dir_.filePath(QStringLiteral("whole.kvtrace"));
    record.saveTraceTo = whole.toStdString();
    runAuditJob(record);
    const QByteArray bytes = bytesOf(whole);
    QVERIFY(bytes.size() > 1000);
    const QString damaged = dir_.filePath(QStringLiteral("damaged.kvtrace"));
    writeBytes(damaged, bytes.left(bytes.size() * 2 / 3));
    const QByteArray before = bytesOf(damaged);

    AuditJobSpec spec;
    spec.modelDir = test::demoModelDir();
    window_->setup()->setSpec(spec);
    window_->openPath(damaged);  // File → Open (a file opens as the trace)
    QCOMPARE(window_->setup()->traceEdit()->text(), QFileInfo(damaged).absoluteFilePath());
    QString shown;
    runAndExpectInputError(&shown);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(shown.contains(QStringLiteral("damaged.kvtrace")), qPrintable(shown));
    QVERIFY2(
        shown.contains(QStringLiteral("field '")) && shown.contains(QStringLiteral("truncated")),
        qPrintable(shown));
    QCOMPARE(bytesOf(damaged), before);
    validAuditStillRuns();
    if (QTest::currentTestFailed()) return;
    QCOMPARE(bytesOf(damaged), before);
  }

  void aTruncatedCheckpoint() {
    const QString model = copyOfDemo(dir_, QStringLiteral("truncated-model"));
    const QString weights = model + QStringLiteral("/model.safetensors");
    QVERIFY(QFile::exists(weights));
    const QByteArray whole = bytesOf(weights);
    writeBytes(weights, whole.left(whole.size() / 2));
    const QByteArray before = bytesOf(weights);

    window_->setup()->setSpec(typedSpec(test::demoModelDir()));
    window_->openPath(model);  // a directory opens as the model
    QCOMPARE(window_->setup()->spec().modelDir, QFileInfo(model).absoluteFilePath().toStdString());
    QString shown;
    runAndExpectInputError(&shown);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(shown.contains(QStringLiteral("model.safetensors")), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("data_offsets")), qPrintable(shown));
    QCOMPARE(bytesOf(weights), before);
    validAuditStillRuns();
    if (QTest::currentTestFailed()) return;
    QCOMPARE(bytesOf(weights), before);
  }

  void aConfigWithAWrongField() {
    const QString model = copyOfDemo(dir_, QStringLiteral("bad-config-model"));
    const QString config = model + QStringLiteral("/config.json");
    QByteArray text = bytesOf(config);
    const QByteArray field = "\"num_key_value_heads\": 2";
    QVERIFY2(text.contains(field), text.constData());
    text.replace(field, "\"num_key_value_heads\": \"two\"");
    writeBytes(config, text);
    const QByteArray before = bytesOf(config);

    window_->setup()->setSpec(typedSpec(test::demoModelDir()));
    window_->openPath(model);
    QString shown;
    runAndExpectInputError(&shown);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(shown.contains(QStringLiteral("config.json")), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("num_key_value_heads")), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("expected an integer")), qPrintable(shown));
    QCOMPARE(bytesOf(config), before);
    validAuditStillRuns();
    if (QTest::currentTestFailed()) return;
    QCOMPARE(bytesOf(config), before);
  }

  void aTraceOfAnotherFamily() {
    // Issue 27: the demo's (llama) trace opened with a qwen2 checkpoint of the same shape is
    // refused before anything runs, with the CLI's message (one rule, in core).
    AuditJobSpec record = test::testAuditSpec();
    const QString trace = dir_.filePath(QStringLiteral("llama-run.kvtrace"));
    record.saveTraceTo = trace.toStdString();
    runAuditJob(record);
    CheckpointSpec qwen2 = CheckpointSpec::demo();
    qwen2.setArchitecture(Architecture::Qwen2);
    const QString model = dir_.filePath(QStringLiteral("qwen2-model"));
    CheckpointWriter(qwen2).write(model.toStdString(), true);

    AuditJobSpec spec;
    spec.modelDir = model.toStdString();
    window_->setup()->setSpec(spec);
    window_->openPath(trace);
    QString shown;
    runAndExpectInputError(&shown);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(shown.contains(QStringLiteral("llama-run.kvtrace")), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("model.architecture is llama but checkpoint")) &&
                 shown.contains(QStringLiteral("has qwen2")),
             qPrintable(shown));
    validAuditStillRuns();
  }

  void aGgufFileOpensAsTheModel() {
    // llama.cpp's model file opens as the model, not as a trace; a damaged one is named.
    const QString gguf = dir_.filePath(QStringLiteral("damaged.gguf"));
    writeBytes(gguf, QByteArray(32, 'x'));
    window_->setup()->setSpec(typedSpec(test::demoModelDir()));
    const std::string traceBefore = window_->setup()->spec().traceFile;
    QVERIFY(window_->openPath(gguf));
    QCOMPARE(window_->setup()->spec().modelDir, QFileInfo(gguf).absoluteFilePath().toStdString());
    QCOMPARE(window_->setup()->spec().traceFile, traceBefore);
    QString shown;
    runAndExpectInputError(&shown);
    if (QTest::currentTestFailed()) return;
    QVERIFY2(shown.contains(QStringLiteral("damaged.gguf")) && shown.contains(QStringLiteral("magic")),
             qPrintable(shown));
    QCOMPARE(bytesOf(gguf), QByteArray(32, 'x'));
    validAuditStillRuns();
  }
};

QTEST_MAIN(DamagedInputTest)
#include "DamagedInputTest.moc"
