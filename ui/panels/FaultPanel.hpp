// Faults for the built-in engine, from FaultSpec::catalog() (injected, so the panel has no
// link-time dependency on the engine): one checkable group per fault with a spin box per
// parameter. Checked faults compose; specs() gives them in the NAME:k=v,... syntax.
#pragma once

#include <QStringList>
#include <QWidget>

#include <vector>

#include "kvscope/FaultSpec.hpp"

class QGroupBox;
class QLabel;
class QSpinBox;
class QVBoxLayout;

namespace kvscope::ui {

class FaultPanel : public QWidget {
  Q_OBJECT

 public:
  explicit FaultPanel(QWidget* parent = nullptr);

  void setCatalog(const std::vector<FaultInfo>& catalog);
  /// The chosen faults, each as "NAME:k=v,..." (parameters in catalog order).
  QStringList specs() const;
  /// Checks the named fault and sets its parameters from a spec text NAME[:k=v,...]; false
  /// (with `error`, and nothing changed) for an unknown fault, parameter or value.
  bool applySpec(const QString& spec, QString* error = nullptr);
  void clearSelection();

 Q_SIGNALS:
  void specsChanged(const QStringList& specs);

 private:
  struct Entry {
    FaultInfo info;
    QGroupBox* box = nullptr;
    std::vector<QSpinBox*> params;
  };
  void updatePreview();

  QVBoxLayout* list_;
  QLabel* preview_;
  QLabel* empty_;
  std::vector<Entry> entries_;
};

}  // namespace kvscope::ui
