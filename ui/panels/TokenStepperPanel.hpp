// The token stepper: a request selector, previous/next step, a line describing the current
// step (what was fed at which position, what was chosen, the logit error) and the token
// strip. Its actions (Right/N, Left/P, D/Ctrl+D) are window-wide shortcuts.
#pragma once

#include <QWidget>

class QAction;
class QComboBox;
class QLabel;
class QPushButton;
class QScrollArea;
class QToolButton;

namespace kvscope::ui {

class RequestListModel;
class SelectionContext;
class TokenStripView;

class TokenStepperPanel : public QWidget {
  Q_OBJECT

 public:
  explicit TokenStepperPanel(SelectionContext* context, QWidget* parent = nullptr);

  TokenStripView* strip() const { return strip_; }
  QComboBox* requestSelector() const { return requests_; }
  QAction* nextAction() const { return next_; }
  QAction* previousAction() const { return previous_; }
  QAction* divergenceAction() const { return divergence_; }
  QString stepDescription() const;
  /// Scrolls the strip so the current step is in view (centred when it was outside).
  void revealCurrent();
  /// The button that points at the first divergence when it is scrolled out of view.
  QToolButton* divergencePin() const { return divergencePin_; }
  QScrollArea* scrollArea() const { return scroll_; }
  /// What the token fills mean (the legend's tooltip).
  static QString colourLegend();

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  void refresh();
  void placeDivergencePin();
  void fitEmptyStrip();

  SelectionContext* context_;
  RequestListModel* requestModel_;
  QComboBox* requests_;
  QLabel* info_;
  QLabel* legend_;
  QToolButton* divergencePin_;
  QPushButton* jump_;
  QScrollArea* scroll_;
  TokenStripView* strip_;
  QAction* next_;
  QAction* previous_;
  QAction* divergence_;
};

}  // namespace kvscope::ui
