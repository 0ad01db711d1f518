// The item models behind the findings, stages, failure matrix and request tables, checked
// with QAbstractItemModelTester (with data, empty, and across resets), plus the fault
// panel's composition of fault specs.
#include <QAbstractItemModelTester>
#include <QGroupBox>
#include <QSpinBox>
#include <QtTest>

#include "TestAudit.hpp"
#include "ui/models/FailureMatrixModel.hpp"
#include "ui/models/FindingsModel.hpp"
#include "ui/models/RequestListModel.hpp"
#include "ui/models/StageListModel.hpp"
#include "ui/panels/FaultPanel.hpp"
#include "ui/views/HeadlineView.hpp"

using namespace kvscope;
using namespace kvscope::ui;

class ItemModelsTest : public QObject {
  Q_OBJECT

 private:
  std::shared_ptr<const AuditJobOutput> output_ = test::makeTestOutput();
  std::shared_ptr<const AuditReport> report() const {
    return std::shared_ptr<const AuditReport>(output_, &output_->result.report);
  }

 private Q_SLOTS:
  void findingsModelListsFindings() {
    FindingsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    model.setReport(report());
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), int(FindingsModel::ColumnCount));
    QCOMPARE(model.index(0, FindingsModel::IdColumn).data().toString(), QStringLiteral("wrong_layer"));
    QCOMPARE(model.index(1, FindingsModel::IdColumn).data().toString(), QStringLiteral("cross_request"));
    QCOMPARE(model.index(0, FindingsModel::MatrixRowColumn).data().toString(),
             QStringLiteral("layer 1 matches, layer 2 differs"));
    // The fixture's wrong_layer fault names no request: both requests show it, in one row.
    QCOMPARE(model.index(0, FindingsModel::WhereColumn).data().toString(),
             QStringLiteral("2 requests: 0 at step 3, 1 at step 3 (layer 2)"));
    QCOMPARE(model.index(0, 0).data(FindingsModel::RequestRole).toLongLong(), 0);
    QCOMPARE(model.index(0, 0).data(FindingsModel::StepRole).toLongLong(), 3);
    QCOMPARE(model.index(0, 0).data(FindingsModel::LayerRole).toLongLong(), 2);
    // Request 1 was written into request 0's cache row: request 0 is the one affected.
    QCOMPARE(model.index(1, 0).data(FindingsModel::RequestRole).toLongLong(), 0);
    QCOMPARE(model.index(1, 0).data(FindingsModel::StepRole).toLongLong(), 4);
    QVERIFY(model.index(0, 0)
                .data(Qt::ToolTipRole)
                .toString()
                .contains(QStringLiteral("layer 2 stores and reads layer 1")));
    model.setReport(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  // A bug that two requests show is two findings in the report (one per request); the views
  // list it once, with both onsets, and select the earliest. Its consequences, one per
  // request, sit in one row under it.
  void findingsOfSeveralRequestsShareOneRow() {
    auto rep = std::make_shared<AuditReport>();
    rep->verdict = "divergent";
    rep->firstDivergence = {true, 0, 3, 1, 7};
    auto add = [&](const char* id, int64_t request, int64_t step, const char* causedBy, const char* why) {
      Finding f;
      f.id = id;
      f.request = request;
      f.step = step;
      f.layer = f.id == "duplicate_append" ? 1 + request : 1;
      f.causedBy = causedBy;
      f.explanation = why;
      f.matrixRow = FailureMatrix::row(id).observation;
      rep->findings.push_back(f);
    };
    add("duplicate_append", 0, 3, "", "request 0 appended twice");
    add("position", 0, 4, "duplicate_append", "request 0 positions off by one");
    add("duplicate_append", 2, 5, "", "request 2 appended twice");
    add("position", 2, 6, "duplicate_append", "request 2 positions off by one");
    FindingsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setReport(rep);
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, FindingsModel::IdColumn).data().toString(), QStringLiteral("duplicate_append"));
    QCOMPARE(model.index(0, FindingsModel::WhereColumn).data().toString(),
             QStringLiteral("2 requests: 0 at step 3, 2 at step 5"));
    QCOMPARE(model.index(0, 0).data(FindingsModel::RequestRole).toLongLong(), 0);
    QCOMPARE(model.index(0, 0).data(FindingsModel::StepRole).toLongLong(), 3);
    QCOMPARE(model.index(0, 0).data(FindingsModel::RequestCountRole).toInt(), 2);
    const QString tip = model.index(0, 0).data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains(QStringLiteral("request 2, step 5: request 2 appended twice")), qPrintable(tip));
    QCOMPARE(model.index(1, FindingsModel::IdColumn).data().toString(), QStringLiteral("\u21b3 position"));
    QCOMPARE(model.index(1, FindingsModel::WhereColumn).data().toString(),
             QStringLiteral("2 requests: 0 at step 4, 2 at step 6 (layer 1)"));
    QCOMPARE(model.group(1)->members[1]->request, 2);
    QCOMPARE(model.group(1)->members[1]->causedBy, std::string("duplicate_append"));

    FailureMatrixModel matrix;
    matrix.setReport(rep);
    const int row = FailureMatrixModel::rowFor(rep->findings[0]);
    QVERIFY(matrix.isMatched(row));
    QCOMPARE(matrix.index(row, FailureMatrixModel::FindingColumn).data().toString(),
             QStringLiteral("duplicate_append (2 requests: 0 at step 3, 2 at step 5)"));
    QVERIFY(HeadlineView::headlineFor(*rep).contains(QStringLiteral("duplicate_append (request 0 appended twice)")));
  }

  void stageModelIsATreeOfSixStages() {
    StageListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setReport(report());
    QCOMPARE(model.rowCount(), 6);
    QCOMPARE(model.rootCauseRow(), 1);  // cache construction
    const QModelIndex cache = model.index(1, 0);
    QCOMPARE(cache.data().toString(), QStringLiteral("2. Cache construction"));
    QCOMPARE(cache.data(StageListModel::StatusRole).toString(), QStringLiteral("fail"));
    QVERIFY(cache.data(StageListModel::RootCauseRole).toBool());
    QVERIFY(!cache.data(Qt::DecorationRole).value<QIcon>().isNull());
    QCOMPARE(model.index(0, 0).data(StageListModel::StatusRole).toString(), QStringLiteral("pass"));
    QVERIFY(model.rowCount(cache) >= 1);
    const QModelIndex check = model.index(model.rowCount(cache) - 1, 0, cache);
    // The core's words for what failed, without the status prefix (the icon carries it).
    const std::string core = report()->stages[1].checks[static_cast<size_t>(check.row())];
    QVERIFY(core.rfind("FAIL: ", 0) == 0);
    QCOMPARE(check.data().toString(), QString::fromStdString(core.substr(6)));
    QCOMPARE(check.data(StageListModel::StatusRole).toString(), QStringLiteral("fail"));
    QCOMPARE(model.parent(check), cache);
    QCOMPARE(model.rowCount(check), 0);
    model.setReport(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void failureMatrixHighlightsTheFiredRows() {
    FailureMatrixModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    // The core's whole table: the method's eight rows (audit-method.md), a heading, then
    // KV Scope's additions in the core's order.
    const auto& core = FailureMatrix::rows();
    QCOMPARE(model.rowCount(), static_cast<int>(core.size()) + 1);
    QCOMPARE(FailureMatrixModel::additionsHeadingRow(), 8);
    const QStringList method = {
        QStringLiteral("position"),         QStringLiteral("wrong_layer"),
        QStringLiteral("duplicate_append"), QStringLiteral("cross_request"),
        QStringLiteral("tie_rule"),         QStringLiteral("rng_order"),
        QStringLiteral("stale_cache"),      QStringLiteral("context_limit")};
    for (int r = 0; r < 8; ++r) {
      QCOMPARE(model.index(r, 0).data(FailureMatrixModel::FindingIdRole).toString(), method[r]);
      QCOMPARE(model.index(r, 0).data(FailureMatrixModel::OriginRole).toString(),
               QStringLiteral("method"));
      QVERIFY(!model.isMatched(r));
    }
    QCOMPARE(model.index(8, 0).data(FailureMatrixModel::OriginRole).toString(),
             QStringLiteral("heading"));
    QVERIFY(model.index(8, 0).data().toString().contains(QStringLiteral("KV Scope's additions")));
    QStringList additions;
    for (int r = 9; r < model.rowCount(); ++r) {
      QCOMPARE(model.index(r, 0).data(FailureMatrixModel::OriginRole).toString(),
               QStringLiteral("kv_scope"));
      additions << model.index(r, 0).data(FailureMatrixModel::FindingIdRole).toString();
    }
    QStringList coreAdditions;
    for (const FailureMatrixRow& row : core)
      if (row.origin != MatrixOrigin::Method) coreAdditions << QString::fromStdString(row.id);
    QCOMPARE(additions, coreAdditions);  // every addition, in the core's order
    for (const char* id : {"reference", "sliding_window", "drift", "speculative_rollback"})
      QVERIFY2(additions.contains(QString::fromLatin1(id)), id);
    const int speculative =
        9 + static_cast<int>(additions.indexOf(QStringLiteral("speculative_rollback")));
    QCOMPARE(model.index(speculative, FailureMatrixModel::FirstCheckColumn).data().toString(),
             QString::fromStdString(FailureMatrix::row(finding::SpeculativeRollback).firstCheck));
    model.setReport(report());
    QVERIFY(model.isMatched(1));  // layer 1 matches, layer 2 differs
    QVERIFY(model.isMatched(3));  // a batch row changes when another request arrives
    for (int r = 0; r < model.rowCount(); ++r)
      if (r != 1 && r != 3) QVERIFY(!model.isMatched(r));
    // The fixture's wrong_layer fault names no request: both requests show it, in one row.
    QCOMPARE(model.index(1, FailureMatrixModel::FindingColumn).data().toString(),
             QStringLiteral("wrong_layer (2 requests: 0 at step 3, 1 at step 3)"));
    QVERIFY(model.index(1, 0).data(Qt::BackgroundRole).isValid());
    QVERIFY(!model.index(0, 0).data(Qt::BackgroundRole).isValid());
    QCOMPARE(model.index(7, FailureMatrixModel::FirstCheckColumn).data().toString(),
             QStringLiteral("context limit reached"));
    // A finding about layers 3/4 names them in the highlighted row, not the method's 1/2.
    Finding layer4;
    layer4.id = "wrong_layer";
    layer4.layer = 4;
    layer4.matrixRow = "layer 3 matches, layer 4 differs";
    layer4.firstCheck = "layer 4's cache source and append";
    model.setFocusFinding(layer4);
    QCOMPARE(model.index(1, FailureMatrixModel::ObservationColumn).data().toString(),
             QStringLiteral("layer 3 matches, layer 4 differs"));
    QCOMPARE(model.index(1, FailureMatrixModel::FirstCheckColumn).data().toString(),
             QStringLiteral("layer 4's cache source and append"));
    QCOMPARE(model.index(3, FailureMatrixModel::ObservationColumn).data().toString(),
             QString::fromStdString(FailureMatrix::row("cross_request").observation));
    model.setFocusRow(1);
    QCOMPARE(model.index(1, FailureMatrixModel::ObservationColumn).data().toString(),
             QStringLiteral("layer 1 matches, layer 2 differs"));  // the table keeps the method's
    QVERIFY(model.index(1, 0).data(Qt::BackgroundRole).value<QColor>() !=
            model.index(3, 0).data(Qt::BackgroundRole).value<QColor>());
  }

  void requestModelListsRequests() {
    RequestListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setOutput(output_);
    QCOMPARE(model.rowCount(), 2);
    QVERIFY(model.index(0, 0).data(RequestListModel::DivergentRole).toBool());
    QCOMPARE(model.index(1, 0).data(RequestListModel::RequestIdRole).toLongLong(), 1);
    QVERIFY(model.index(0, 0).data().toString().contains(QStringLiteral("step 3")));
    QCOMPARE(model.index(0, RequestListModel::StepsColumn).data().toLongLong(), 6);
    QCOMPARE(model.rowOf(1), 1);
    QCOMPARE(model.rowOf(7), -1);
    model.setOutput(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void faultPanelComposesSpecs() {
    std::vector<FaultInfo> catalog = {
        {"wrong_layer", "layer L reads layer S's cache", "layer 1 matches, layer 2 differs",
         {{"layer", "layer that reads the wrong cache", "2"}, {"source", "layer it reads", "1"}}},
        {"cross_request", "request R writes into request V's cache",
         "a batch row changes when another request arrives",
         {{"request", "writer", "1"}, {"victim", "victim", "0"}}},
        {"duplicate_append", "appends the step's records twice", "cache length grows by two in one step", {}},
    };
    FaultPanel panel;
    panel.setCatalog(catalog);
    QSignalSpy spy(&panel, &FaultPanel::specsChanged);
    QVERIFY(panel.specs().isEmpty());
    const auto boxes = panel.findChildren<QGroupBox*>();
    QCOMPARE(boxes.size(), 3);
    boxes[0]->setChecked(true);
    QCOMPARE(panel.specs(), QStringList{QStringLiteral("wrong_layer:layer=2,source=1")});
    boxes[0]->findChildren<QSpinBox*>()[0]->setValue(5);
    boxes[2]->setChecked(true);
    QCOMPARE(panel.specs(), (QStringList{QStringLiteral("wrong_layer:layer=5,source=1"),
                                         QStringLiteral("duplicate_append")}));
    QVERIFY(spy.count() >= 3);
    panel.clearSelection();
    QVERIFY(panel.specs().isEmpty());
    QVERIFY(panel.applySpec(QStringLiteral("cross_request:request=0,victim=1")));
    QCOMPARE(panel.specs(), QStringList{QStringLiteral("cross_request:request=0,victim=1")});
    QVERIFY(!panel.applySpec(QStringLiteral("no_such_fault")));
  }
};

QTEST_MAIN(ItemModelsTest)
#include "ItemModelsTest.moc"
