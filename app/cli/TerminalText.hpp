// Measuring and fitting text for a terminal (kvscope-cli inspect): columns of UTF-8 text
// with ANSI escape sequences in it, cutting, padding and wrapping to a width, and the width
// and height to lay a screen out in.
#pragma once

#include <string>
#include <vector>

namespace kvscope::cli {

/// Columns a UTF-8 string takes on a terminal: escape sequences count zero, combining marks
/// zero, East Asian wide and emoji code points two, everything else (a byte that is not
/// valid UTF-8 included: terminals draw it as one replacement character) one.
int displayWidth(const std::string& s);
/// Bytes that are not valid UTF-8 (a byte-level token cut inside a character) written as
/// \xNN, so that what the terminal draws is what displayWidth counted.
std::string escapeInvalidUtf8(const std::string& s);
/// `s` cut to at most `width` columns, ending in "…" when it was longer. Escape sequences
/// are kept; a cut line that held any ends with a reset, so colour never leaks.
std::string fitWidth(const std::string& s, int width);
/// `s` padded with spaces to `width` columns.
std::string padRight(const std::string& s, int width);
/// Words of `text` wrapped to `width` columns, every line prefixed by `indent`; a word
/// longer than a line is broken. Every line is at most max(width, indent + 20) columns.
std::vector<std::string> wrapText(const std::string& text, int width, const std::string& indent);
/// `items` joined by `separator` into lines of at most `width` columns: the first line
/// starts with `first`, the others with `indent`; an item is never split (one longer than a
/// line is cut with fitWidth).
std::vector<std::string> packItems(const std::vector<std::string>& items, int width,
                                   const std::string& first, const std::string& indent,
                                   const std::string& separator);
/// The first `maxLines` of `lines`; when some are left out the last kept one ends in "…".
std::vector<std::string> firstLines(std::vector<std::string> lines, size_t maxLines, int width);

/// Columns to lay out in: `requested` when > 0; else the terminal's width when stdout is a
/// terminal; else $COLUMNS when it is a positive number; else 80.
int terminalWidth(int requested);
/// Lines to lay out in: `requested` when > 0; else the terminal's height when stdout is a
/// terminal; else $LINES when it is a positive number; else 24.
int terminalHeight(int requested);

}  // namespace kvscope::cli
