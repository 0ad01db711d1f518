// The inspector's colours in one place, chosen to survive a screenshot: one strong alarm
// colour for "divergent", one selection colour, quiet colours for everything else.
#pragma once

#include <QColor>

namespace kvscope::ui::Theme {

inline QColor alarm() { return QColor(0xD5, 0x00, 0x00); }        // divergent layer/token
inline QColor alarmSoft() { return QColor(0xFF, 0xCD, 0xD2); }
inline QColor afterDivergence() { return QColor(0xFF, 0xEB, 0xEE); }
inline QColor ok() { return QColor(0x2E, 0x7D, 0x32); }
inline QColor okSoft() { return QColor(0xC8, 0xE6, 0xC9); }
inline QColor selection() { return QColor(0x15, 0x65, 0xC0); }    // current step/layer
inline QColor promptToken() { return QColor(0xEC, 0xEF, 0xF1); }
inline QColor generatedToken() { return QColor(0xE3, 0xF2, 0xFD); }
inline QColor unfedToken() { return QColor(0xF5, 0xF5, 0xF5); }
inline QColor neutral() { return QColor(0x78, 0x90, 0x9C); }
inline QColor expected() { return QColor(0x61, 0x61, 0x61); }
inline QColor cacheLength() { return QColor(0xEF, 0x6C, 0x00); }

}  // namespace kvscope::ui::Theme
