#include "ui/panels/RecentFilesMenu.hpp"

#include <QFileInfo>
#include <QSettings>
#include <algorithm>

namespace kvscope::ui {

namespace {
const QString kEntriesKey = QStringLiteral("recent/entries");  // "model\tPATH" / "trace\tPATH"
const QString kLegacyKey = QStringLiteral("recentFiles");      // before kinds: paths only
}  // namespace

RecentFilesMenu::RecentFilesMenu(const QString& title, QWidget* parent) : QMenu(title, parent) {
  setObjectName(QStringLiteral("recentMenu"));
  setToolTipsVisible(true);
  rebuild();
}

QStringList RecentFilesMenu::of(Kind kind) const {
  QStringList out;
  for (const Entry& e : entries_)
    if (e.kind == kind) out << e.path;
  return out;
}

QStringList RecentFilesMenu::all() const {
  QStringList out;
  for (const Entry& e : entries_) out << e.path;
  return out;
}

void RecentFilesMenu::add(Kind kind, const QString& path) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.path == path; }),
                 entries_.end());
  entries_.insert(entries_.begin(), Entry{kind, path});
  int seen = 0;
  entries_.erase(
      std::remove_if(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.kind == kind && ++seen > kMaxPerKind; }),
      entries_.end());
  rebuild();
  save();
}

void RecentFilesMenu::clearEntries() {
  entries_.clear();
  rebuild();
  save();
}

void RecentFilesMenu::load() {
  QSettings s;
  entries_.clear();
  if (s.contains(kEntriesKey)) {
    for (const QString& item : s.value(kEntriesKey).toStringList()) {
      const int tab = item.indexOf(QLatin1Char('\t'));
      if (tab <= 0) continue;
      const Kind kind = item.left(tab) == QLatin1String("model") ? Kind::Model : Kind::Trace;
      entries_.push_back(Entry{kind, item.mid(tab + 1)});
    }
  } else {
    for (const QString& p : s.value(kLegacyKey).toStringList())
      entries_.push_back(Entry{QFileInfo(p).isDir() ? Kind::Model : Kind::Trace, p});
  }
  rebuild();
}

void RecentFilesMenu::save() const {
  QStringList items;
  for (const Entry& e : entries_)
    items << (e.kind == Kind::Model ? QStringLiteral("model\t") : QStringLiteral("trace\t")) +
                 e.path;
  QSettings s;
  s.setValue(kEntriesKey, items);
  s.remove(kLegacyKey);
}

void RecentFilesMenu::rebuild() {
  clear();
  auto section = [this](Kind kind, const QString& title) {
    addSection(title);
    const QStringList paths = of(kind);
    if (paths.isEmpty()) addAction(tr("(none)"))->setEnabled(false);
    for (const QString& p : paths) {
      QAction* a = addAction(p);
      a->setToolTip(kind == Kind::Model ? tr("Open as the model directory")
                                        : tr("Open as the trace"));
      a->setEnabled(QFileInfo::exists(p));
      // Queued: opening a file rebuilds this menu, which must not delete the action while
      // it is still delivering its own triggered().
      connect(a, &QAction::triggered, this, [this, kind, p] {
        QMetaObject::invokeMethod(
            this, [this, kind, p] { Q_EMIT openRequested(kind, p); }, Qt::QueuedConnection);
      });
    }
  };
  section(Kind::Model, tr("Models"));
  section(Kind::Trace, tr("Traces"));
  addSeparator();
  clear_ = addAction(tr("&Clear recent files"));
  clear_->setObjectName(QStringLiteral("clearRecent"));
  clear_->setEnabled(!entries_.empty());
  connect(clear_, &QAction::triggered, this, &RecentFilesMenu::clearEntries);
}

}  // namespace kvscope::ui
