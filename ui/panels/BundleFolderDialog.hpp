// The folder dialog of "Export bug-report bundle": a folder that does not exist yet is a
// valid answer (type its name and press Enter; it is created), unlike
// QFileDialog::getExistingDirectory, which refuses a new name.
#pragma once

#include <QFileDialog>

namespace kvscope::ui {

class BundleFolderDialog : public QFileDialog {
  Q_OBJECT

 public:
  explicit BundleFolderDialog(QWidget* parent = nullptr, const QString& directory = QString());

  /// The chosen folder (absolute; created when it was new), "" when cancelled.
  static QString getFolder(QWidget* parent, const QString& directory = QString());

 public Q_SLOTS:
  void accept() override;

 private:
  QString result_;  // a folder accept() created
};

}  // namespace kvscope::ui
