// The selected request's token stream as a strip of cells (text piece over token id),
// grouped by the step that fed them. The current step is outlined, the first divergent
// step is filled in the alarm colour and later steps are tinted. Painted, not itemised.
// Click a token to select its step; Left/Right (or P/N) step, D jumps to the divergence.
#pragma once

#include <QWidget>

#include <cstdint>
#include <vector>

#include "kvscope/Inspection.hpp"

namespace kvscope::ui {

class SelectionContext;

class TokenStripView : public QWidget {
  Q_OBJECT

 public:
  explicit TokenStripView(SelectionContext* context, QWidget* parent = nullptr);

  struct Cell {
    int64_t step = -1;       // step that fed it; -1: generated but never fed
    int64_t tokenId = -1;
    int64_t position = -1;
    QString text;
    bool prompt = false;
    QRect rect;
  };
  const std::vector<Cell>& cells() const { return cells_; }
  /// Bounding rectangle of the cells a step fed (empty when the step fed none, and for a
  /// negative step: the never-fed cells have step -1 but belong to no step).
  QRect stepRect(int64_t step) const;
  /// The request's first divergent step, -1 when it has none.
  int64_t divergentStep() const { return divergentStep_; }

  /// The last step with fed tokens (-1: none); a click on a never-fed token selects it.
  int64_t lastStep() const;
  /// The start-up hint painted while there is no audit.
  static QString placeholderText();

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 Q_SIGNALS:
  /// The current step's cells moved (the enclosing scroll area keeps them visible).
  void currentRectChanged(const QRect& rect);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void rebuild();
  static QString visible(const QString& piece);
  static QString stepLabel(int64_t step, bool divergent);

  SelectionContext* context_;
  int64_t request_ = -1;
  int64_t divergentStep_ = -1;
  std::vector<Cell> cells_;
  int width_ = 0;
};

}  // namespace kvscope::ui
