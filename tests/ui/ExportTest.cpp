// Exports: PNG (QImage loads it), SVG (XML/SVG header), PDF (%PDF header), the current
// view, the bug-report bundle (3 files, valid JSON) and the overwrite policy (refuse,
// ask-and-decline, ask-and-accept).
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include "TestAudit.hpp"
#include "ui/bridge/InspectorController.hpp"
#include "ui/panels/InspectorWindow.hpp"
#include "ui/panels/KvHeatmapPanel.hpp"
#include "ui/views/KvHeatmapView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

QByteArray head(const QString& path, int n) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.read(n);
}

}  // namespace

class ExportTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<InspectorWindow> window_;
  QTemporaryDir dir_;

  QString path(const QString& name) const { return dir_.filePath(name); }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    window_ = std::make_unique<InspectorWindow>(nullptr, std::vector<FaultInfo>{});
    window_->resize(1400, 900);
    window_->show();
    QVERIFY(QTest::qWaitForWindowExposed(window_.get()));
    window_->showOutput(test::makeTestOutput());
    QVERIFY(window_->controller()->waitUntilSettled(10000));
    window_->exporter()->setOverwritePolicy(ExportController::OverwritePolicy::Refuse);
  }

  void cleanupTestCase() { window_.reset(); }

  void writesPng() {
    const ExportOutcome out = window_->exportWindow(path(QStringLiteral("window.png")));
    QVERIFY2(out.ok, qPrintable(out.error));
    QImage image;
    QVERIFY(image.load(path(QStringLiteral("window.png"))));
    QCOMPARE(image.size(), window_->size() * image.devicePixelRatio());
    QVERIFY(head(path(QStringLiteral("window.png")), 8).startsWith("\x89PNG"));
  }

  void writesSvg() {
    const ExportOutcome out = window_->exportWindow(path(QStringLiteral("window.svg")));
    QVERIFY2(out.ok, qPrintable(out.error));
    const QByteArray h = head(path(QStringLiteral("window.svg")), 64).trimmed();
    QVERIFY2(h.startsWith("<?xml") || h.startsWith("<svg"), h.constData());
    QVERIFY(QFileInfo(path(QStringLiteral("window.svg"))).size() > 1000);
  }

  void writesPdf() {
    const ExportOutcome out = window_->exportWindow(path(QStringLiteral("window.pdf")));
    QVERIFY2(out.ok, qPrintable(out.error));
    QVERIFY(head(path(QStringLiteral("window.pdf")), 5).startsWith("%PDF"));
    QVERIFY(QFileInfo(path(QStringLiteral("window.pdf"))).size() > 1000);
  }

  void exportsTheCurrentView() {
    // The current view is the panel that last had focus: click into the heatmaps.
    QVERIFY(QTest::qWaitForWindowActive(window_.get()));
    QTest::mouseClick(window_->heatmaps()->cachedView(), Qt::LeftButton);
    QCOMPARE(window_->currentView(), static_cast<QWidget*>(window_->heatmaps()));
    const ExportOutcome out = window_->exportCurrentView(path(QStringLiteral("view.png")));
    QVERIFY2(out.ok, qPrintable(out.error));
    QImage image(path(QStringLiteral("view.png")));
    QCOMPARE(image.size(), window_->heatmaps()->size() * image.devicePixelRatio());
    QVERIFY(!window_->exportCurrentView(path(QStringLiteral("view.bmp"))).ok);  // unknown format
  }

  void refusesToOverwrite() {
    const QString p = path(QStringLiteral("existing.png"));
    {
      QFile f(p);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("keep me");
    }
    ExportOutcome out = window_->exportWindow(p);
    QVERIFY(!out.ok);
    QVERIFY2(out.error.contains(QStringLiteral("refusing to overwrite")), qPrintable(out.error));
    QCOMPARE(head(p, 64), QByteArray("keep me"));
    // Ask policy: declined keeps the file, accepted overwrites it.
    QStringList asked;
    window_->exporter()->setOverwritePolicy(ExportController::OverwritePolicy::Ask);
    window_->exporter()->setAskOverwrite([&asked](const QStringList& existing) {
      asked = existing;
      return false;
    });
    QVERIFY(!window_->exportWindow(p).ok);
    QCOMPARE(asked.size(), 1);
    QCOMPARE(head(p, 64), QByteArray("keep me"));
    window_->exporter()->setAskOverwrite([](const QStringList&) { return true; });
    QVERIFY(window_->exportWindow(p).ok);
    QVERIFY(head(p, 8).startsWith("\x89PNG"));
    window_->exporter()->setOverwritePolicy(ExportController::OverwritePolicy::Refuse);
  }

  void bundleHasThreeFilesAndRefusesOverwrite() {
    const QString bundle = path(QStringLiteral("bundle"));
    ExportOutcome out = window_->exportBundle(bundle);
    QVERIFY2(out.ok, qPrintable(out.error));
    QCOMPARE(out.written.size(), 3);
    const QDir d(bundle);
    QCOMPARE(d.entryList(QDir::Files, QDir::Name),
             (QStringList{QStringLiteral("report.json"), QStringLiteral("screenshot.png"), QStringLiteral("summary.md")}));
    QVERIFY(!QImage(d.filePath(QStringLiteral("screenshot.png"))).isNull());
    QFile json(d.filePath(QStringLiteral("report.json")));
    QVERIFY(json.open(QIODevice::ReadOnly));
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(json.readAll(), &error);
    QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
    QCOMPARE(doc.object().value(QStringLiteral("verdict")).toString(), QStringLiteral("divergent"));
    QFile md(d.filePath(QStringLiteral("summary.md")));
    QVERIFY(md.open(QIODevice::ReadOnly));
    QVERIFY(md.readAll().contains("wrong_layer"));
    // A second bundle into the same folder is refused and leaves the files alone.
    const qint64 size = QFileInfo(d.filePath(QStringLiteral("report.json"))).size();
    out = window_->exportBundle(bundle);
    QVERIFY(!out.ok);
    QVERIFY(out.error.contains(QStringLiteral("report.json")));
    QCOMPARE(QFileInfo(d.filePath(QStringLiteral("report.json"))).size(), size);
  }

  // Issue 27, item 13: a folder that cannot be written says why (the system's reason).
  void unwritableFolderSaysWhy() {
    QTemporaryDir locked;
    QVERIFY(locked.isValid());
    QFile::setPermissions(locked.path(), QFileDevice::ReadOwner | QFileDevice::ExeOwner);
    // Root writes anywhere it may: /proc refuses new files even to root.
    QString folder = locked.path();
    if (QFile probe(QDir(folder).filePath(QStringLiteral("probe"))); probe.open(QIODevice::WriteOnly)) {
      probe.remove();
      folder = QStringLiteral("/proc");
    }
    const QString png = QDir(folder).filePath(QStringLiteral("view.png"));
    ExportOutcome out = window_->exportWindow(png);
    QVERIFY(!out.ok);
    QVERIFY2(out.error.startsWith(png + QStringLiteral(": could not write the PNG: ")) &&
                 out.error.size() > png.size() + 30,
             qPrintable(out.error));
    out = window_->exportWindow(QDir(folder).filePath(QStringLiteral("view.svg")));
    QVERIFY(!out.ok);
    QVERIFY2(!out.error.endsWith(QStringLiteral("SVG")) && !out.error.contains(QStringLiteral("unknown")),
             qPrintable(out.error));
    out = window_->exportBundle(QDir(folder).filePath(QStringLiteral("bundle")));
    QVERIFY(!out.ok);
    QVERIFY2(out.error.contains(QStringLiteral("cannot create the folder: ")), qPrintable(out.error));
    QFile::setPermissions(locked.path(), QFileDevice::ReadOwner | QFileDevice::WriteOwner |
                                             QFileDevice::ExeOwner);
  }
};

QTEST_MAIN(ExportTest)
#include "ExportTest.moc"
