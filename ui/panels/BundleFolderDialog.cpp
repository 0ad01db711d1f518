#include "ui/panels/BundleFolderDialog.hpp"

#include <QDir>
#include <QFileInfo>
#include <QLineEdit>
#include <QMessageBox>

namespace kvscope::ui {

BundleFolderDialog::BundleFolderDialog(QWidget* parent, const QString& directory)
    : QFileDialog(parent, tr("Bug-report bundle folder (an existing one, or type a new name)"),
                  directory) {
  setObjectName(QStringLiteral("bundleFolderDialog"));
  setFileMode(QFileDialog::Directory);
  setOption(QFileDialog::ShowDirsOnly, true);
  // The non-native dialog: the same behaviour on every desktop, and a new name is accepted.
  setOption(QFileDialog::DontUseNativeDialog, true);
  setLabelText(QFileDialog::FileName, tr("Folder:"));
  setLabelText(QFileDialog::Accept, tr("&Export here"));
}

void BundleFolderDialog::accept() {
  // A typed name that does not exist yet is created, then accepted like an existing folder.
  const auto* edit = findChild<QLineEdit*>(QStringLiteral("fileNameEdit"));
  const QString typed = edit ? edit->text().trimmed() : QString();
  if (!typed.isEmpty()) {
    const QString path =
        QDir(directory().absolutePath()).absoluteFilePath(QDir::fromNativeSeparators(typed));
    const QFileInfo info(path);
    if (!info.exists()) {
      if (!QDir().mkpath(path)) {
        QMessageBox::warning(this, windowTitle(),
                             tr("Cannot create the folder %1").arg(QDir::toNativeSeparators(path)));
        return;
      }
      setDirectory(QFileInfo(path).absolutePath());
      selectFile(path);
      QDialog::accept();
      result_ = path;
      return;
    }
  }
  QFileDialog::accept();
}

QString BundleFolderDialog::getFolder(QWidget* parent, const QString& directory) {
  BundleFolderDialog dialog(parent, directory);
  if (dialog.exec() != QDialog::Accepted) return {};
  if (!dialog.result_.isEmpty()) return dialog.result_;
  const QStringList files = dialog.selectedFiles();
  return files.isEmpty() ? QString() : QFileInfo(files.first()).absoluteFilePath();
}

}  // namespace kvscope::ui
