// Hover help on painted views, from the data under the mouse: a token of the strip (its text,
// id, position and the step that fed it), the position plot (expected and recorded position,
// cache length and the events at the step under the mouse) and the banner (what it says and
// what to do next). One event filter, installed on those widgets; widgets that set their own
// tooltip (an elided label) keep it.
#pragma once

#include <QObject>
#include <QPoint>
#include <QString>

class QWidget;

namespace kvscope::ui {

class HeadlineView;
class PositionTimelineView;
class SelectionContext;
class TokenStripView;

class ViewToolTips : public QObject {
  Q_OBJECT

 public:
  ViewToolTips(SelectionContext* context, TokenStripView* strip, PositionTimelineView* timeline,
               HeadlineView* headline, QObject* parent = nullptr);

  /// The tooltip each view shows at a widget point ("" where there is none).
  QString tokenText(const QPoint& pos) const;
  QString timelineText(const QPoint& pos) const;
  QString headlineText() const;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  SelectionContext* context_;
  TokenStripView* strip_;
  PositionTimelineView* timeline_;
  HeadlineView* headline_;
};

}  // namespace kvscope::ui
