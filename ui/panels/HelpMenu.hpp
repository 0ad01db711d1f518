// The Help menu: the list of every shortcut and mouse action (F1; ShortcutTableModel, the
// table docs/inspector.md shows too) and About (the version of KV Scope, of LibTorch, and
// the BLAS library this build runs on).
#pragma once

#include <QMenu>

class QDialog;

namespace kvscope::ui {

class HelpMenu : public QMenu {
  Q_OBJECT

 public:
  explicit HelpMenu(QWidget* window);

  QAction* shortcutsAction() const { return shortcuts_; }
  QAction* aboutAction() const { return about_; }
  /// The shortcut list (created on first use; shown non-modally, raised when shown again).
  QDialog* shortcutsDialog();
  /// The About text (rich text): versions and where the documentation is.
  static QString aboutText();

 private:
  QWidget* window_;
  QAction* shortcuts_;
  QAction* about_;
  QDialog* dialog_ = nullptr;
};

}  // namespace kvscope::ui
