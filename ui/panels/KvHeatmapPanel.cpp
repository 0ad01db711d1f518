#include "ui/panels/KvHeatmapPanel.hpp"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScopeGuard>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "ui/bridge/SelectionContext.hpp"
#include "ui/views/ColourMaps.hpp"
#include "ui/views/ElidedLabel.hpp"
#include "ui/views/KvHeatmapView.hpp"
#include "ui/views/Theme.hpp"

namespace kvscope::ui {

namespace {
constexpr int64_t kFullViewPositions = 64;  // longer caches get a window
constexpr int64_t kWindowPositions = 48;
constexpr int64_t kEdgeGap = 2;  // empty columns right of the newest record
}  // namespace

KvHeatmapPanel::KvHeatmapPanel(SelectionContext* context, QWidget* parent)
    : QWidget(parent), context_(context) {
  layer_ = new QSpinBox(this);
  layer_->setPrefix(tr("layer "));
  layer_->setToolTip(tr("Layer (also: click a bar in the layer overview)"));
  head_ = new QSpinBox(this);
  head_->setPrefix(tr("kv head "));
  kind_ = new QComboBox(this);
  kind_->addItem(tr("Keys (K)"));
  kind_->addItem(tr("Values (V)"));
  gradient_ = new QComboBox(this);
  gradient_->addItems(gradientNames());
  gradient_->setToolTip(tr("Colour map of the reference and cached heatmaps"));
  note_ = new QLabel(this);  // its own line under the controls, shown when there is a note
  note_->setStyleSheet(QStringLiteral("color: %1; font-weight: bold;").arg(Theme::alarm().name()));
  note_->setWordWrap(true);
  note_->hide();

  reference_ = new KvHeatmapView(KvHeatmapView::Role::Reference, this);
  cached_ = new KvHeatmapView(KvHeatmapView::Role::Cached, this);
  difference_ = new KvHeatmapView(KvHeatmapView::Role::Difference, this);

  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(0, 0, 0, 0);
  heading_ = new QLabel(tr("<b>K/V cache after the step</b>"), this);
  controls->addWidget(heading_);
  controls->addWidget(layer_);
  controls->addWidget(head_);
  controls->addWidget(kind_);
  layerKind_ = new ElidedLabel(this);  // what the shown layer is: "sliding window 6, NoPE"
  layerKind_->setObjectName(QStringLiteral("layerKind"));
  layerKind_->hide();
  controls->addWidget(layerKind_, 1);
  controls->addStretch(1);
  controls->addWidget(new QLabel(tr("colours"), this));
  controls->addWidget(gradient_);
  auto* maps = new QHBoxLayout;
  maps->setContentsMargins(0, 0, 0, 0);
  maps->setSpacing(2);
  // Equal thirds, whatever the titles' lengths.
  for (KvHeatmapView* v : {reference_, cached_, difference_}) {
    v->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Expanding);
    maps->addWidget(v, 1);
  }
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 2, 4, 2);
  layout->setSpacing(2);
  layout->addLayout(controls);
  layout->addWidget(note_);
  layout->addLayout(maps, 1);

  // Zooming or panning one map moves the other two with it (same positions).
  for (KvHeatmapView* v : {reference_, cached_, difference_})
    connect(v->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
            [this, v](const QCPRange& range) {
              if (syncingRange_) return;
              syncingRange_ = true;
              for (KvHeatmapView* other : {reference_, cached_, difference_})
                if (other != v && other->xAxis->range() != range) {
                  other->xAxis->setRange(range);
                  other->replot(QCustomPlot::rpQueuedReplot);
                }
              syncingRange_ = false;
            });
  connect(layer_, &QSpinBox::valueChanged, this, [this](int v) { context_->setLayer(v); });
  connect(head_, &QSpinBox::valueChanged, this, [this](int v) { context_->setHead(v); });
  connect(kind_, &QComboBox::currentIndexChanged, this,
          [this](int i) { context_->setKind(i == 0 ? KvKind::Keys : KvKind::Values); });
  connect(gradient_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    const QCPColorGradient g = gradientByName(name);
    reference_->setGradient(g);
    cached_->setGradient(g);
    Q_EMIT gradientChanged(name);
  });
  connect(context_, &SelectionContext::outputChanged, this, [this] {
    syncControls();
    if (!context_->output()) {
      for (KvHeatmapView* v : {reference_, cached_, difference_}) v->clearBuffer(tr("no audit"));
    }
  });
  connect(context_, &SelectionContext::selectionChanged, this, [this] { syncControls(); });
  connect(context_, &SelectionContext::snapshotChanged, this, [this] { paintSnapshot(); });
  syncControls();
}

QStringList KvHeatmapPanel::gradientNames() {
  return {QStringLiteral("Polar"), QStringLiteral("Spectrum"), QStringLiteral("Jet"),
          QStringLiteral("Thermal"), QStringLiteral("Grayscale"), QStringLiteral("Geography"),
          QStringLiteral("Viridis"), QStringLiteral("Cividis")};
}

bool KvHeatmapPanel::isColourBlindSafe(const QString& name) {
  return name == QLatin1String("Viridis") || name == QLatin1String("Cividis");
}

QCPColorGradient KvHeatmapPanel::gradientByName(const QString& name) {
  if (name == QLatin1String("Spectrum")) return QCPColorGradient(QCPColorGradient::gpSpectrum);
  if (name == QLatin1String("Jet")) return QCPColorGradient(QCPColorGradient::gpJet);
  if (name == QLatin1String("Thermal")) return QCPColorGradient(QCPColorGradient::gpThermal);
  if (name == QLatin1String("Grayscale")) return QCPColorGradient(QCPColorGradient::gpGrayscale);
  if (name == QLatin1String("Geography")) return QCPColorGradient(QCPColorGradient::gpGeography);
  if (name == QLatin1String("Viridis")) return ColourMaps::viridis();
  if (name == QLatin1String("Cividis")) return ColourMaps::cividis();
  return QCPColorGradient(QCPColorGradient::gpPolar);
}

QString KvHeatmapPanel::gradientName() const { return gradient_->currentText(); }

void KvHeatmapPanel::setGradientName(const QString& name) {
  const int i = gradient_->findText(name);
  if (i >= 0) gradient_->setCurrentIndex(i);
}

void KvHeatmapPanel::syncControls() {
  const InspectionPoint& s = context_->selection();
  const QSignalBlocker b1(layer_), b2(head_), b3(kind_);
  layer_->setRange(0, static_cast<int>(std::max<int64_t>(0, context_->numLayers() - 1)));
  // A recurrent layer's state has its value heads (more than the KV heads on Qwen3.5).
  const auto& snap = context_->snapshot();
  const int64_t heads = snap && snap->point.layer == s.layer && snap->heads > 0 ? snap->heads : context_->numKvHeads();
  head_->setRange(0, static_cast<int>(std::max<int64_t>(0, heads - 1)));
  layer_->setValue(static_cast<int>(s.layer));
  head_->setValue(static_cast<int>(s.head));
  kind_->setCurrentIndex(s.kind == KvKind::Keys ? 0 : 1);
  const AuditResult* r = context_->result();
  const bool divergentLayer = r && r->report.firstDivergence.present &&
                              r->report.firstDivergence.layer == s.layer &&
                              r->report.firstDivergence.request == s.request;
  layer_->setStyleSheet(divergentLayer ? QStringLiteral("QSpinBox { color: white; background: %1; font-weight: bold; }")
                                             .arg(Theme::alarm().name())
                                       : QString());
}

void KvHeatmapPanel::paintSnapshot() {
  const auto& snap = context_->snapshot();
  if (!snap) return;
  // Each map gets its own extent below; only the user's zoom and pan are copied.
  syncingRange_ = true;
  const auto done = qScopeGuard([this] { syncingRange_ = false; });
  const InspectionPoint& s = snap->point;
  // The records the selected step appended (framed in every map).
  const int64_t first = snap->appendedCount > 0 ? snap->appendedFirst : -1;
  const int64_t last = first >= 0 ? first + snap->appendedCount - 1 : -1;
  // A recurrent layer: one value head's state [Dk, Dv], rows the key features.
  // A latent layer (MLA): one "head" of latent rows (keys) and roped key parts (values).
  const QString kindText = snap->showsLatent ? (s.kind == KvKind::Keys ? tr("latent c_kv") : tr("roped k_pe"))
                                             : (s.kind == KvKind::Keys ? QStringLiteral("K") : QStringLiteral("V"));
  const QString what = snap->showsState ? tr("layer %1 · value head %2 · recurrent state").arg(s.layer).arg(s.head)
                                        : tr("layer %1 · head %2 · %3").arg(s.layer).arg(s.head).arg(kindText);
  QString heading = snap->showsState
                        ? tr("<b>Recurrent state after step %1</b> · key features across, value features down")
                              .arg(s.step)
                        : tr("<b>K/V cache after step %1</b>").arg(s.step);
  if (last >= first && first >= 0)
    heading += first == last ? tr(" · new record: pos %1").arg(first)
                             : tr(" · new records: pos %1–%2").arg(first).arg(last);
  heading_->setText(heading);
  for (KvHeatmapView* v : {reference_, cached_, difference_})
    v->setAxisNames(snap->showsState ? tr("key feature") : tr("position"),
                    snap->showsState    ? tr("value feature")
                    : !snap->showsLatent ? tr("head dim")
                    : s.kind == KvKind::Keys ? tr("latent feature")
                                             : tr("roped feature"));
  // A state has value heads and no keys/values choice.
  head_->setPrefix(snap->showsState ? tr("value head ") : tr("kv head "));
  kind_->setEnabled(!snap->showsState);
  kind_->setItemText(0, snap->showsLatent ? tr("c_kv (K)") : tr("Keys (K)"));
  kind_->setItemText(1, snap->showsLatent ? tr("k_pe (V)") : tr("Values (V)"));
  kind_->setToolTip(snap->showsState    ? tr("A recurrent layer keeps one state, not keys and values")
                    : snap->showsLatent ? tr("A latent layer caches one latent row (c_kv) and one roped key part "
                                             "(k_pe) per token, shared by every head")
                                        : QString());
  if (snap->heads > 0 && head_->maximum() != snap->heads - 1) {
    const QSignalBlocker block(head_);
    head_->setMaximum(static_cast<int>(snap->heads - 1));
    head_->setValue(static_cast<int>(s.head));
  }
  // What the layer is (sliding, NoPE, sinks, ...), on the layer control.
  layer_->setToolTip(snap->layerKind.empty()
                         ? tr("Layer (also: click a bar in the layer overview)")
                         : tr("Layer %1: %2 (also: click a bar in the layer overview)")
                               .arg(s.layer)
                               .arg(QString::fromStdString(snap->layerKind).toHtmlEscaped()));
  layerKind_->setFullText(QString::fromStdString(snap->layerKind));
  layerKind_->setVisible(!snap->layerKind.empty());
  const double m = std::max(1e-6, static_cast<double>(snap->valueAbsMax));
  const QCPRange valueRange(-m, m);
  if (snap->reference.empty())
    reference_->clearBuffer(tr("no reference"));
  else
    reference_->setBuffer(snap->reference, snap->referencePositions, snap->headDim, valueRange, what);
  if (snap->cached.empty())
    cached_->clearBuffer(tr("no records"));
  else
    cached_->setBuffer(snap->cached, snap->cachedPositions, snap->headDim, valueRange, what);
  if (snap->absDiff.empty()) {
    difference_->clearBuffer(tr("no comparison"));
  } else {
    // The audit's tolerance for this layer is the floor: precision noise stays dark.
    const double floor = snap->diffFloor;
    const double upper = std::max(static_cast<double>(snap->diffMax), floor);
    const int64_t t = std::min(snap->cachedPositions, snap->referencePositions);
    QString sub = snap->diffMax > floor
                      ? (snap->showsState ? tr("max %1 at key feature %2, value feature %3")
                                          : tr("max %1 at pos %2, dim %3"))
                            .arg(snap->diffMax, 0, 'g', 3)
                            .arg(snap->diffArgPosition)
                            .arg(snap->diffArgDim)
                  : snap->diffIsNoise()
                      ? tr("max %1 (noise)").arg(snap->diffMax, 0, 'g', 2)
                      : tr("max %1, not noise: %2")
                            .arg(snap->diffMax, 0, 'g', 2)
                            .arg(QString::fromStdString(snap->diffStructure));
    difference_->setBuffer(snap->absDiff, t, snap->headDim, QCPRange(0.0, upper), sub);
  }
  for (KvHeatmapView* v : {reference_, cached_, difference_}) v->setMarkedPositions(first, last);
  // Long caches: show a window that ends just after the step's records, so the records
  // this step appended are columns you can see, not one pixel of a 500-position strip.
  const int64_t t = std::max(snap->cachedPositions, snap->referencePositions);
  if (t > kFullViewPositions && last >= 0) {
    // About 8 pixels a column, so that one new record is a column you can see.
    const int px = reference_->axisRect()->width();
    const int64_t window =
        px > 0 ? std::clamp<int64_t>(px / 8, 16, kWindowPositions) : kWindowPositions;
    const int64_t hi = std::min(t - 1 + kEdgeGap, last + std::max<int64_t>(kEdgeGap, window / 8));
    const int64_t lo = std::max<int64_t>(0, hi - window + 1);
    for (KvHeatmapView* v : {reference_, cached_, difference_})
      v->setVisiblePositions(static_cast<double>(lo), static_cast<double>(hi));
  } else if (last >= 0 && last == t - 1) {
    // The newest records are the last columns: leave a gap so their frame does not merge
    // with the map's edge.
    for (KvHeatmapView* v : {reference_, cached_, difference_})
      v->setVisiblePositions(0.0, static_cast<double>(t - 1 + kEdgeGap));
  }
  const QString note = QString::fromStdString(snap->note);
  QString shown = note;
  if (snap->rowRewritten)
    shown = snap->cachedFromReplay
                ? tr("\u26A0 this cache row was overwritten after its records were appended: "
                     "Cached shows the row "
                     "rebuilt from every write into its slot (checksum verified)")
                : tr("\u26A0 this cache row was overwritten after its records were appended "
                     "(checksum); the trace "
                     "does not show by what");
  note_->setText(shown);
  note_->setToolTip(note);
  note_->setVisible(!note_->text().isEmpty());
}

}  // namespace kvscope::ui
