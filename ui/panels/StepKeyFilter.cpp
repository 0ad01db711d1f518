#include "ui/panels/StepKeyFilter.hpp"

#include <QAbstractSpinBox>
#include <QComboBox>
#include <QKeyEvent>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QTextEdit>
#include <QWidget>

namespace kvscope::ui {

namespace {

// Where the user types text: those widgets keep every key.
bool editsText(QWidget* w) {
  for (QWidget* p = w; p; p = p->parentWidget()) {
    if (qobject_cast<QAbstractSpinBox*>(p)) return false;  // numbers: N, ], D are not typed
    if (auto* combo = qobject_cast<QComboBox*>(p)) return combo->isEditable();
    if (auto* edit = qobject_cast<QLineEdit*>(p)) return !edit->isReadOnly();
    if (auto* text = qobject_cast<QPlainTextEdit*>(p)) return !text->isReadOnly();
    if (auto* text = qobject_cast<QTextEdit*>(p)) return !text->isReadOnly();
    if (p->isWindow()) break;
  }
  return false;
}

}  // namespace

StepKeyFilter::StepKeyFilter(QWidget* window) : QObject(window), window_(window) {}

bool StepKeyFilter::isSteppingKey(int key, Qt::KeyboardModifiers modifiers) {
  if ((modifiers & ~Qt::KeypadModifier) != Qt::NoModifier) return false;
  switch (key) {
    case Qt::Key_Right:
    case Qt::Key_Left:
    case Qt::Key_N:
    case Qt::Key_P:
    case Qt::Key_D:
    case Qt::Key_V:
    case Qt::Key_BracketLeft:
    case Qt::Key_BracketRight:
      return true;
    default:
      return false;
  }
}

bool StepKeyFilter::isWindowCommandKey(int key, Qt::KeyboardModifiers modifiers) {
  const Qt::KeyboardModifiers m = modifiers & ~Qt::KeypadModifier;
  // Ctrl+E is "end of line" in a line edit's emacs bindings (the typed file name then
  // landed in the Trace field): the export is what the user asked for.
  return key == Qt::Key_E && (m == Qt::ControlModifier || m == (Qt::ControlModifier | Qt::ShiftModifier));
}

bool StepKeyFilter::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() != QEvent::ShortcutOverride || !watched->isWidgetType()) return false;
  auto* key = static_cast<QKeyEvent*>(event);
  const bool command = isWindowCommandKey(key->key(), key->modifiers());
  if (!command && !isSteppingKey(key->key(), key->modifiers())) return false;
  auto* widget = static_cast<QWidget*>(watched);
  // Only this inspector's windows (the main window and its floating docks).
  QWidget* top = widget->window();
  if (top != window_ && top->parentWidget() != window_) return false;
  if (!command && editsText(widget)) return false;
  // Not accepted and not delivered: the shortcut map triggers the window's action.
  event->ignore();
  return true;
}

}  // namespace kvscope::ui
