// File → Open recent, by kind: the model directories and the traces opened last (eight of
// each, newest first), and "Clear recent files". Persists with QSettings.
#pragma once

#include <QMenu>
#include <QStringList>
#include <vector>

namespace kvscope::ui {

class RecentFilesMenu : public QMenu {
  Q_OBJECT

 public:
  enum class Kind { Model, Trace };
  static constexpr int kMaxPerKind = 8;

  explicit RecentFilesMenu(const QString& title, QWidget* parent = nullptr);

  /// Moves `path` to the front of its kind and saves.
  void add(Kind kind, const QString& path);
  QStringList models() const { return of(Kind::Model); }
  QStringList traces() const { return of(Kind::Trace); }
  /// Every entry, newest first across both kinds.
  QStringList all() const;
  /// Forgets every entry and saves.
  void clearEntries();
  QAction* clearAction() const { return clear_; }

  void load();
  void save() const;

 Q_SIGNALS:
  void openRequested(kvscope::ui::RecentFilesMenu::Kind kind, const QString& path);

 private:
  struct Entry {
    Kind kind;
    QString path;
  };
  QStringList of(Kind kind) const;
  void rebuild();

  std::vector<Entry> entries_;  // newest first
  QAction* clear_ = nullptr;
};

}  // namespace kvscope::ui
