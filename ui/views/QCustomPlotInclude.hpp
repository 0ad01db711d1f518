// QCustomPlot 2.1's header uses the `signals` and `foreach` keywords, which this project
// switches off (QT_NO_KEYWORDS: Qt's keyword macros collide with torch identifiers).
// Include <qcustomplot.h> only through this header: it maps the keywords for the duration
// of the include and removes them again.
#pragma once

#ifdef QT_NO_KEYWORDS
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef foreach
#else
#include <qcustomplot.h>
#endif
