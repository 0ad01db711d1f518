#include "ui/panels/FaultPanel.hpp"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include <limits>

namespace kvscope::ui {

FaultPanel::FaultPanel(QWidget* parent) : QWidget(parent) {
  auto* inner = new QWidget;
  list_ = new QVBoxLayout(inner);
  list_->setContentsMargins(2, 2, 2, 2);
  empty_ = new QLabel(tr("No fault catalog: this build has no built-in engine."), inner);
  empty_->setWordWrap(true);
  list_->addWidget(empty_);
  list_->addStretch(1);
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(inner);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);

  preview_ = new QLabel(this);
  preview_->setWordWrap(true);
  preview_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* clear = new QPushButton(tr("No faults"), this);
  connect(clear, &QPushButton::clicked, this, &FaultPanel::clearSelection);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  auto* intro = new QLabel(tr("Faults the built-in engine injects on purpose; each reproduces one "
                              "row of the failure matrix. Several compose."), this);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  layout->addWidget(scroll, 1);
  layout->addWidget(preview_);
  layout->addWidget(clear);
  updatePreview();
}

void FaultPanel::setCatalog(const std::vector<FaultInfo>& catalog) {
  for (auto& e : entries_) delete e.box;
  entries_.clear();
  empty_->setVisible(catalog.empty());
  int insertAt = list_->count() - 1;  // before the stretch
  for (const FaultInfo& info : catalog) {
    Entry e;
    e.info = info;
    e.box = new QGroupBox(QString::fromStdString(info.name));
    e.box->setCheckable(true);
    e.box->setChecked(false);
    e.box->setToolTip(QString::fromStdString(info.description + "\nMatrix row: " + info.matrixRow));
    auto* form = new QFormLayout(e.box);
    form->setContentsMargins(6, 2, 6, 2);
    auto* desc = new QLabel(QString::fromStdString(info.description), e.box);
    desc->setWordWrap(true);
    form->addRow(desc);
    for (const FaultParameter& p : info.parameters) {
      auto* spin = new QSpinBox(e.box);
      spin->setRange(-1000000, 1000000);
      bool ok = false;
      const int v = QString::fromStdString(p.defaultValue).toInt(&ok);
      spin->setValue(ok ? v : 0);
      spin->setToolTip(QString::fromStdString(p.meaning));
      form->addRow(QString::fromStdString(p.name), spin);
      connect(spin, &QSpinBox::valueChanged, this, &FaultPanel::updatePreview);
      e.params.push_back(spin);
    }
    connect(e.box, &QGroupBox::toggled, this, &FaultPanel::updatePreview);
    list_->insertWidget(insertAt++, e.box);
    entries_.push_back(std::move(e));
  }
  updatePreview();
}

QStringList FaultPanel::specs() const {
  QStringList out;
  for (const auto& e : entries_) {
    if (!e.box->isChecked()) continue;
    QString spec = QString::fromStdString(e.info.name);
    QStringList kv;
    for (size_t i = 0; i < e.params.size(); ++i)
      kv << QStringLiteral("%1=%2").arg(QString::fromStdString(e.info.parameters[i].name)).arg(e.params[i]->value());
    if (!kv.isEmpty()) spec += QLatin1Char(':') + kv.join(QLatin1Char(','));
    out << spec;
  }
  return out;
}

bool FaultPanel::applySpec(const QString& spec, QString* error) {
  auto fail = [error](const QString& why) {
    if (error) *error = why;
    return false;
  };
  const QString name = spec.section(QLatin1Char(':'), 0, 0).trimmed();
  const QString params = spec.section(QLatin1Char(':'), 1);
  QStringList known;
  for (auto& e : entries_) {
    known << QString::fromStdString(e.info.name);
    if (QString::fromStdString(e.info.name) != name) continue;
    // Parse everything first: a bad parameter leaves the panel as it was.
    std::vector<std::pair<size_t, int>> values;
    for (const QString& kv : params.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
      const QString key = kv.section(QLatin1Char('='), 0, 0).trimmed();
      bool ok = false;
      const int value = kv.section(QLatin1Char('='), 1).trimmed().toInt(&ok);
      size_t index = e.params.size();
      QStringList names;
      for (size_t i = 0; i < e.params.size(); ++i) {
        names << QString::fromStdString(e.info.parameters[i].name);
        if (names.back() == key) index = i;
      }
      if (index == e.params.size())
        return fail(tr("%1 has no parameter '%2' (parameters: %3)")
                        .arg(name, key, names.join(QStringLiteral(", "))));
      if (!ok || !kv.contains(QLatin1Char('=')))
        return fail(tr("%1: expected an integer, got '%2'")
                        .arg(key, kv.section(QLatin1Char('='), 1).trimmed()));
      values.emplace_back(index, value);
    }
    e.box->setChecked(true);
    for (const auto& [index, value] : values) e.params[index]->setValue(value);
    return true;
  }
  return fail(
      known.isEmpty()
          ? tr("unknown fault '%1' (this build has no fault catalog)").arg(name)
          : tr("unknown fault '%1' (known: %2)").arg(name, known.join(QStringLiteral(", "))));
}

void FaultPanel::clearSelection() {
  for (auto& e : entries_) e.box->setChecked(false);
}

void FaultPanel::updatePreview() {
  const QStringList s = specs();
  preview_->setText(s.isEmpty() ? tr("<i>no faults: a clean run</i>")
                                : tr("<b>--fault</b> %1").arg(s.join(QStringLiteral(" <b>--fault</b> "))));
  Q_EMIT specsChanged(s);
}

}  // namespace kvscope::ui
