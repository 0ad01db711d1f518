#include "ui/panels/HelpMenu.hpp"

#include <QApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QTableView>
#include <QVBoxLayout>

#include "kvscope/BuildInfo.hpp"
#include "ui/models/ShortcutTableModel.hpp"

namespace kvscope::ui {

HelpMenu::HelpMenu(QWidget* window) : QMenu(tr("&Help"), window), window_(window) {
  setObjectName(QStringLiteral("helpMenu"));
  shortcuts_ = addAction(tr("&Keyboard shortcuts and mouse…"));
  shortcuts_->setObjectName(QStringLiteral("helpShortcuts"));
  shortcuts_->setShortcut(QKeySequence(Qt::Key_F1));
  shortcuts_->setShortcutContext(Qt::ApplicationShortcut);
  connect(shortcuts_, &QAction::triggered, this, [this] {
    QDialog* d = shortcutsDialog();
    d->show();
    // Rows fit their text once the columns have their real widths.
    if (auto* table = d->findChild<QTableView*>(QStringLiteral("shortcutsTable")))
      table->resizeRowsToContents();
    d->raise();
    d->activateWindow();
  });
  addSeparator();
  about_ = addAction(tr("&About KV Scope"));
  about_->setObjectName(QStringLiteral("helpAbout"));
  about_->setMenuRole(QAction::AboutRole);
  connect(about_, &QAction::triggered, this, [this] {
    auto* box = new QMessageBox(QMessageBox::Information, tr("About KV Scope"), aboutText(),
                                QMessageBox::Ok, window_);
    box->setObjectName(QStringLiteral("aboutBox"));
    box->setTextFormat(Qt::RichText);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
  });
}

QDialog* HelpMenu::shortcutsDialog() {
  if (dialog_) return dialog_;
  dialog_ = new QDialog(window_);
  dialog_->setObjectName(QStringLiteral("shortcutsDialog"));
  dialog_->setWindowTitle(tr("Keyboard shortcuts and mouse"));
  auto* table = new QTableView(dialog_);
  table->setObjectName(QStringLiteral("shortcutsTable"));
  table->setModel(new ShortcutTableModel(table));
  table->verticalHeader()->hide();
  table->horizontalHeader()->setStretchLastSection(false);
  table->horizontalHeader()->setSectionResizeMode(ShortcutTableModel::ActionColumn,
                                                  QHeaderView::Stretch);
  table->horizontalHeader()->setSectionResizeMode(ShortcutTableModel::InputColumn,
                                                  QHeaderView::ResizeToContents);
  table->horizontalHeader()->setSectionResizeMode(ShortcutTableModel::WhereColumn,
                                                  QHeaderView::ResizeToContents);
  table->setWordWrap(true);
  table->setSelectionBehavior(QAbstractItemView::SelectRows);
  table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table->setAlternatingRowColors(true);
  auto* note = new QLabel(
      tr("The same list is in docs/inspector.md. Stepping keys work wherever the focus is, "
         "except while typing in a text field."),
      dialog_);
  note->setWordWrap(true);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog_);
  connect(buttons, &QDialogButtonBox::rejected, dialog_, &QDialog::hide);
  auto* layout = new QVBoxLayout(dialog_);
  layout->addWidget(table, 1);
  layout->addWidget(note);
  layout->addWidget(buttons);
  dialog_->resize(760, 620);
  table->resizeRowsToContents();
  return dialog_;
}

QString HelpMenu::aboutText() {
  const BuildInfo info = BuildInfo::detect();
  const QString blas =
      info.blasLibrary.empty() ? tr("not found") : QString::fromStdString(info.blasLibrary);
  return tr("<h3>KV Scope %1</h3>"
            "<p>Audits cached LLM generation against an uncached reference: which request, step, "
            "layer and cache row a KV-cache bug shows up in.</p>"
            "<p>LibTorch %2 (%3 threads)<br>BLAS: %4%5<br>Qt %6</p>"
            "<p>Documentation: docs/inspector.md (this window), docs/audit.md (the stages), "
            "docs/trace-format.md (.kvtrace). Help → Keyboard shortcuts (F1) lists every key and "
            "mouse action.</p>")
      .arg(QString::fromStdString(info.kvscopeVersion), QString::fromStdString(info.torchVersion))
      .arg(info.torchThreads)
      .arg(blas.toHtmlEscaped(), info.optimizedBlas ? QString() : tr(" (reference BLAS: slow)"))
      .arg(QString::fromLatin1(qVersion()));
}

}  // namespace kvscope::ui
