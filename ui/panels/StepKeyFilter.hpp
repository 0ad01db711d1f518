// Keeps the inspector's stepping keys (Right/Left/N/P, [ ], D, V) working wherever the focus
// is in its windows: a spin box or a read-only text view would otherwise claim them (Qt
// sends a ShortcutOverride to the focus widget first, and a spin box's line edit accepts
// every printable key and the cursor keys), so after using the kv-head spin box Right did
// nothing until a click elsewhere. Widgets where the user types text (line edits, the
// prompt editor, editable combo boxes) keep their keys, but for the exports' Ctrl+E and
// Ctrl+Shift+E (a line edit's "end of line" otherwise).
#pragma once

#include <QObject>

namespace kvscope::ui {

class StepKeyFilter : public QObject {
  Q_OBJECT

 public:
  /// Filters ShortcutOverride events for widgets inside `window`'s windows (the window
  /// and its floating docks); install it on the application.
  explicit StepKeyFilter(QWidget* window);

  /// True for the keys the inspector binds without a modifier.
  static bool isSteppingKey(int key, Qt::KeyboardModifiers modifiers);
  /// True for the window's commands that text fields must not claim (Ctrl+E, Ctrl+Shift+E:
  /// the exports), which reach the window even from a line edit.
  static bool isWindowCommandKey(int key, Qt::KeyboardModifiers modifiers);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QWidget* window_;
};

}  // namespace kvscope::ui
