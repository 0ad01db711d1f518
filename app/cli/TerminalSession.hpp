// The terminal while `kvscope-cli inspect` steps through an audit with keys: raw input (no
// echo, a key at a time), the alternate screen and a hidden cursor, all restored when the
// session ends — also on SIGTERM or SIGHUP. Keys arrive one by one, arrows decoded.
#pragma once

#include <string>
#include <vector>

namespace kvscope::cli {

struct Key {
  enum Code { None, Char, Left, Right, Up, Down, Escape, End };
  Code code = None;
  char c = 0;  // for Char
};

class TerminalSession {
 public:
  /// Whether stdin and stdout are both terminals (the key-driven mode needs both).
  static bool available();

  TerminalSession();  // throws std::runtime_error when the terminal cannot be set up
  ~TerminalSession();
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  int width() const;   // columns of the terminal now
  int height() const;  // lines of the terminal now
  /// Draws `lines` from the top left, clearing what was there (the last line ends without a
  /// newline, so a screenful never scrolls).
  void draw(const std::vector<std::string>& lines) const;
  /// The next key; Key::None after `timeoutMs` without one or when a signal (a resize)
  /// came first; Key::End when stdin closed.
  Key readKey(int timeoutMs) const;
  /// Whether the terminal was resized since the last call.
  static bool takeResized();
};

}  // namespace kvscope::cli
