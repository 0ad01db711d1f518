#include "TerminalSession.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

namespace kvscope::cli {

namespace {

constexpr const char* kEnter = "\x1b[?1049h\x1b[?25l";  // alternate screen, cursor hidden
constexpr const char* kLeave = "\x1b[?25h\x1b[?1049l";

termios g_saved{};
volatile std::sig_atomic_t g_active = 0;
volatile std::sig_atomic_t g_resized = 0;
struct sigaction g_oldTerm{}, g_oldHup{}, g_oldWinch{};

void writeAll(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(STDOUT_FILENO, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void restoreTerminal() {
  if (!g_active) return;
  g_active = 0;
  tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
  writeAll(kLeave, std::strlen(kLeave));
}

// SIGTERM / SIGHUP: the terminal as it was, then the signal's default action.
void onTerminate(int sig) {
  restoreTerminal();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void onResize(int) { g_resized = 1; }

winsize size() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) ws = winsize{};
  return ws;
}

}  // namespace

bool TerminalSession::available() { return isatty(STDIN_FILENO) && isatty(STDOUT_FILENO); }

TerminalSession::TerminalSession() {
  if (tcgetattr(STDIN_FILENO, &g_saved) != 0)
    throw std::runtime_error(std::string("cannot read the terminal's settings: ") +
                             std::strerror(errno));
  termios raw = g_saved;
  raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO | ISIG | IEXTEN));
  raw.c_iflag &= static_cast<tcflag_t>(~(IXON | ICRNL));
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  struct sigaction sa {};
  sa.sa_handler = onTerminate;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_oldTerm);
  sigaction(SIGHUP, &sa, &g_oldHup);
  sa.sa_handler = onResize;  // no SA_RESTART: a resize wakes readKey's poll
  sigaction(SIGWINCH, &sa, &g_oldWinch);
  // TCSANOW: keys typed while the audit ran are kept.
  if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) {
    sigaction(SIGTERM, &g_oldTerm, nullptr);
    sigaction(SIGHUP, &g_oldHup, nullptr);
    sigaction(SIGWINCH, &g_oldWinch, nullptr);
    throw std::runtime_error(std::string("cannot set the terminal up for keys: ") +
                             std::strerror(errno));
  }
  g_active = 1;
  writeAll(kEnter, std::strlen(kEnter));
}

TerminalSession::~TerminalSession() {
  restoreTerminal();
  sigaction(SIGTERM, &g_oldTerm, nullptr);
  sigaction(SIGHUP, &g_oldHup, nullptr);
  sigaction(SIGWINCH, &g_oldWinch, nullptr);
}

int TerminalSession::width() const {
  const winsize ws = size();
  return ws.ws_col > 0 ? ws.ws_col : 80;
}

int TerminalSession::height() const {
  const winsize ws = size();
  return ws.ws_row > 0 ? ws.ws_row : 24;
}

void TerminalSession::draw(const std::vector<std::string>& lines) const {
  std::string screen = "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i)
    screen += lines[i] + "\x1b[K" + (i + 1 < lines.size() ? "\r\n" : "");
  screen += "\x1b[J";
  writeAll(screen.data(), screen.size());
}

Key TerminalSession::readKey(int timeoutMs) const {
  pollfd pfd{STDIN_FILENO, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, timeoutMs);
  if (ready <= 0) return {};
  unsigned char c = 0;
  const ssize_t n = ::read(STDIN_FILENO, &c, 1);
  if (n < 0 && errno == EINTR) return {};
  if (n <= 0) return {Key::End, 0};
  if (c != 0x1b) return {Key::Char, static_cast<char>(c)};
  // An arrow is ESC [ A..D (or ESC O A..D) arriving at once; ESC alone is Escape.
  pfd.revents = 0;
  if (::poll(&pfd, 1, 50) <= 0) return {Key::Escape, 0};
  char seq[8] = {};
  const ssize_t m = ::read(STDIN_FILENO, seq, sizeof seq);
  if (m >= 2 && (seq[0] == '[' || seq[0] == 'O')) {
    switch (seq[1]) {
      case 'A': return {Key::Up, 0};
      case 'B': return {Key::Down, 0};
      case 'C': return {Key::Right, 0};
      case 'D': return {Key::Left, 0};
      default: break;
    }
  }
  return {Key::Char, 0};
}

bool TerminalSession::takeResized() {
  const bool r = g_resized != 0;
  g_resized = 0;
  return r;
}

}  // namespace kvscope::cli
