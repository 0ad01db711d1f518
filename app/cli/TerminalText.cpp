#include "TerminalText.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace kvscope::cli {

namespace {

// The index just past the escape sequence that starts at s[i] (an ESC): CSI sequences
// (ESC [ parameters final-byte) and two-byte escapes.
size_t escapeEnd(const std::string& s, size_t i) {
  if (i + 1 >= s.size()) return s.size();
  if (s[i + 1] != '[') return i + 2;
  size_t j = i + 2;
  while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7e)) ++j;
  return std::min(s.size(), j + 1);
}

// The code point at s[i] and its length in bytes; a byte that does not start valid UTF-8
// is one byte standing for U+FFFD.
char32_t decodeAt(const std::string& s, size_t i, size_t* length) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  *length = 1;
  if (c < 0x80) return c;
  size_t n = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0xFFFD;
  }
  if (i + n > s.size()) return 0xFFFD;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
  *length = n;
  return cp;
}

struct Range {
  char32_t lo, hi;
};

bool inRanges(char32_t c, const Range* ranges, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (c >= ranges[k].lo && c <= ranges[k].hi) return true;
  return false;
}

// Combining marks and zero-width characters (the common blocks).
constexpr Range kZero[] = {{0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD},
                           {0x0610, 0x061A}, {0x064B, 0x065F}, {0x0E31, 0x0E31},
                           {0x0E34, 0x0E3A}, {0x200B, 0x200F}, {0x20D0, 0x20FF},
                           {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xE0100, 0xE01EF}};
// East Asian wide and fullwidth characters and emoji (Unicode's W and F classes, coarsely).
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
    {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x303E},
    {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xA960, 0xA97F},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE10, 0xFE19},
    {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4},
    {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF},
    {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F251}, {0x1F300, 0x1F64F},
    {0x1F680, 0x1F6FF}, {0x1F7E0, 0x1F7EB}, {0x1F900, 0x1F9FF}, {0x1FA70, 0x1FAFF},
    {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};

int columnsOf(char32_t c) {
  if (c < 0x300) return 1;
  if (inRanges(c, kZero, sizeof kZero / sizeof kZero[0])) return 0;
  return inRanges(c, kWide, sizeof kWide / sizeof kWide[0]) ? 2 : 1;
}

// The first `columns` columns of `s` (escapes kept) into *head, the rest into *tail.
void splitAtColumn(const std::string& s, int columns, std::string* head, std::string* tail) {
  int n = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '\x1b') {
      i = escapeEnd(s, i);
      continue;
    }
    size_t len = 1;
    const int w = columnsOf(decodeAt(s, i, &len));
    if (n + w > columns) break;
    n += w;
    i += len;
  }
  *head = s.substr(0, i);
  *tail = s.substr(i);
}

int envNumber(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n > 0 && n < 100000 ? static_cast<int>(n) : 0;
}

}  // namespace

int displayWidth(const std::string& s) {
  int n = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '\x1b') {
      i = escapeEnd(s, i);
      continue;
    }
    size_t len = 1;
    n += columnsOf(decodeAt(s, i, &len));
    i += len;
  }
  return n;
}

std::string escapeInvalidUtf8(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const char32_t cp = decodeAt(s, i, &len);
    if (cp == 0xFFFD && len == 1) {
      static const char* hex = "0123456789abcdef";
      const auto c = static_cast<unsigned char>(s[i]);
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else {
      out += s.substr(i, len);
    }
    i += len;
  }
  return out;
}

std::string fitWidth(const std::string& s, int width) {
  if (displayWidth(s) <= width) return s;
  std::string head, tail;
  splitAtColumn(s, std::max(0, width - 1), &head, &tail);
  // Escapes of the cut part still apply (a reset at its end, say): keep them, drop the text.
  std::string escapes;
  for (size_t i = 0; i < tail.size();) {
    if (tail[i] == '\x1b') {
      const size_t e = escapeEnd(tail, i);
      escapes += tail.substr(i, e - i);
      i = e;
    } else {
      ++i;
    }
  }
  const bool styled = head.find('\x1b') != std::string::npos || !escapes.empty();
  return head + (width > 0 ? "\u2026" : "") + (styled ? "\x1b[0m" : "");
}

std::string padRight(const std::string& s, int width) {
  return s + std::string(static_cast<size_t>(std::max(0, width - displayWidth(s))), ' ');
}

std::vector<std::string> wrapText(const std::string& text, int width, const std::string& indent) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string word, line;
  const int room = std::max(20, width - displayWidth(indent));
  while (words >> word) {
    if (!line.empty() && displayWidth(line) + 1 + displayWidth(word) > room) {
      lines.push_back(indent + line);
      line.clear();
    }
    // A word longer than a whole line: as much of it as fits, the rest on the next lines.
    while (displayWidth(line) + (line.empty() ? 0 : 1) + displayWidth(word) > room) {
      std::string head, tail;
      splitAtColumn(word, room - displayWidth(line) - (line.empty() ? 0 : 1), &head, &tail);
      lines.push_back(indent + line + (line.empty() ? "" : " ") + head);
      line.clear();
      word = tail;
    }
    if (!word.empty()) line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(indent + line);
  return lines;
}

std::vector<std::string> packItems(const std::vector<std::string>& items, int width,
                                   const std::string& first, const std::string& indent,
                                   const std::string& separator) {
  std::vector<std::string> lines;
  std::string line = first;
  bool empty = true;
  for (const std::string& item : items) {
    if (!empty && displayWidth(line) + displayWidth(separator) + displayWidth(item) > width) {
      lines.push_back(line);
      line = indent;
      empty = true;
    }
    line += (empty ? "" : separator) + item;
    empty = false;
  }
  if (!empty || lines.empty()) lines.push_back(line);
  for (auto& l : lines) l = fitWidth(l, width);
  return lines;
}

std::vector<std::string> firstLines(std::vector<std::string> lines, size_t maxLines, int width) {
  if (lines.size() <= maxLines) return lines;
  lines.resize(maxLines);
  if (lines.empty()) return lines;
  std::string& last = lines.back();
  if (displayWidth(last) + 1 <= width)
    last += "\u2026";
  else
    last = fitWidth(last + " ", width);  // one column over: cut, ending in "…"
  return lines;
}

int terminalWidth(int requested) {
  if (requested > 0) return requested;
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (const int n = envNumber("COLUMNS")) return n;
  return 80;
}

int terminalHeight(int requested) {
  if (requested > 0) return requested;
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0)
    return ws.ws_row;
  if (const int n = envNumber("LINES")) return n;
  return 24;
}

}  // namespace kvscope::cli
