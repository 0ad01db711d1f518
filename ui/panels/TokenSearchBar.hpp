// Find a token in the selected request's strip by its text ("cache", case-insensitive) or
// its id ("#311"; a bare number matches ids and text): the first match is selected as you
// type, Enter goes to the next one, Shift+Enter to the previous one, Esc closes the bar.
// Selecting a match selects the step that fed the token (every view follows).
#pragma once

#include <QWidget>
#include <vector>

class QLabel;
class QLineEdit;
class QToolButton;

namespace kvscope::ui {

class SelectionContext;
class TokenStripView;

class TokenSearchBar : public QWidget {
  Q_OBJECT

 public:
  TokenSearchBar(SelectionContext* context, TokenStripView* strip, QWidget* parent = nullptr);

  QLineEdit* edit() const { return edit_; }
  /// Shows the bar and puts the cursor in it (Ctrl+F).
  void activate();
  /// Goes to the next (or previous) match, wrapping; false when nothing matches.
  bool findNext(bool backwards = false);
  /// "2 of 5: ' cache' #311 at position 4 (step 0)" or why nothing was found.
  QString status() const;
  /// Indexes into the strip's cells that match `query`.
  std::vector<int> matches(const QString& query) const;
  int currentCell() const { return current_; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void search();
  void goTo(int matchIndex);

  SelectionContext* context_;
  TokenStripView* strip_;
  QLineEdit* edit_;
  QToolButton* previous_;
  QToolButton* next_;
  QLabel* status_;
  std::vector<int> matches_;
  int matchIndex_ = -1;
  int current_ = -1;  // the matched cell
};

}  // namespace kvscope::ui
