// The banner at the top of the window: the verdict in one line a screenshot reader cannot
// miss, e.g. "Divergent: request 0, step 3, layer 2 — wrong_layer (layer 2 reads layer 1's
// K/V)", alarm-red when divergent, green when clean, grey before any audit.
#pragma once

#include <QFrame>

#include "kvscope/AuditReport.hpp"

class QLabel;

namespace kvscope::ui {

class SelectionContext;

class HeadlineView : public QFrame {
  Q_OBJECT

 public:
  explicit HeadlineView(SelectionContext* context, QWidget* parent = nullptr);

  QString headline() const;
  /// The headline text for a report (also used by headless mode on stderr).
  static QString headlineFor(const AuditReport& report);
  /// Shows a transient state ("Running audit…", an error) until the next result.
  void showMessage(const QString& text, bool error);

 private:
  void refresh();
  void setColours(const QColor& background);
  void showStale();

  SelectionContext* context_;
  QLabel* title_;
  QLabel* detail_;
  bool messageShown_ = false;  // showMessage() text until the next output
};

}  // namespace kvscope::ui
