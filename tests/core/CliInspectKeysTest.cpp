// kvscope-cli inspect on a terminal: run on a pseudo-terminal of 80x24, it draws a compact
// screen that fits (the verdict and the first check on top), moves with keys (n, arrows,
// j/k) and quits on q with the audit's exit code, leaving the last screen behind; with
// --no-keys it prints once and exits. Piped output is CliInspectTest's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "CliRunner.hpp"
#include "TestSupport.hpp"

using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {

// `text` without its escape sequences.
std::string plain(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\x1b') {
      out += text[i];
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '[') {
      i += 2;
      while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7e)) ++i;
    } else {
      ++i;
    }
  }
  return out;
}

// kvscope-cli with stdin, stdout and stderr on the slave side of a pseudo-terminal.
class PtyRun {
 public:
  PtyRun(const std::vector<std::string>& args, unsigned short cols, unsigned short rows) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const std::string slave = ptsname(master_);
    winsize ws{};
    ws.ws_col = cols;
    ws.ws_row = rows;
    ioctl(master_, TIOCSWINSZ, &ws);
    std::vector<std::string> argv{KVSCOPE_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      setsid();
      const int fd = open(slave.c_str(), O_RDWR);
      if (fd < 0) _exit(126);
      ioctl(fd, TIOCSCTTY, 0);
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      if (fd > 2) close(fd);
      close(master_);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
  }
  ~PtyRun() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool started() const { return master_ >= 0 && pid_ > 0; }
  const std::string& out() const { return out_; }

  /// Reads until `needle` appears at or after `from` (escape sequences left out); false
  /// after `seconds` without it.
  bool waitFor(const std::string& needle, size_t from, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (plain(out_.substr(std::min(from, out_.size()))).find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end || !readSome(100)) return false;
    }
    return true;
  }
  void send(const std::string& keys) {
    if (write(master_, keys.data(), keys.size()) < 0) ADD_FAILURE() << "cannot write to the pty";
  }
  /// The exit code once the process ends (reading what it still writes); -1 on a timeout.
  int exitCode(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      readSome(50);
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        while (readSome(50)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    return -1;
  }

 private:
  // False when the other side is closed.
  bool readSome(int timeoutMs) {
    pollfd p{master_, POLLIN, 0};
    if (poll(&p, 1, timeoutMs) <= 0) return true;
    char buf[4096];
    const ssize_t n = read(master_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string out_;
};

std::vector<std::string> keysDemoInspect(const std::string& model) {
  return {"inspect",   model,
          "--prompt",  "The cache must hold exactly one record per layer and position.",
          "--prompt",  "A second request arrives.",
          "--arrival", "0",
          "--arrival", "3",
          "--max-new", "12",
          "--fault",   "wrong_layer:layer=2,source=1",
          "--fault",   "cross_request:request=1,victim=0"};
}

const std::string& keysDemoModel() {
  static const std::string dir = [] {
    const fs::path d = freshDir("cli-inspect-keys-demo");
    const CliRun made = runKvscopeCli({"make-demo", d.string()});
    EXPECT_TRUE(made.exitedWith(0)) << made;
    return d.string();
  }();
  return dir;
}

std::vector<std::string> withModel(std::vector<std::string> args) {
  args[1] = keysDemoModel();
  args.insert(args.begin() + 1, "--model");
  return args;
}

// Columns of a line: escape sequences zero, a code point one.
size_t screenColumns(const std::string& line) {
  size_t n = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      if (i + 1 < line.size() && line[i + 1] == '[') {
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
      } else {
        ++i;
      }
      continue;
    }
    n += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  }
  return n;
}

// The lines of the last screen drawn before `end` (a screen: ESC[H ... ESC[J).
std::vector<std::string> lastScreen(const std::string& out, size_t end) {
  const size_t stop = out.rfind("\x1b[J", end);
  const size_t start = stop == std::string::npos ? std::string::npos : out.rfind("\x1b[H", stop);
  std::vector<std::string> lines;
  if (start == std::string::npos) return lines;
  const std::string screen = out.substr(start + 3, stop - start - 3);
  size_t at = 0;
  while (at <= screen.size()) {
    const size_t nl = screen.find("\r\n", at);
    std::string line = screen.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    for (size_t k; (k = line.find("\x1b[K")) != std::string::npos;) line.erase(k, 3);
    line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());  // the pty's ONLCR
    lines.push_back(line);
    if (nl == std::string::npos) break;
    at = nl + 2;
  }
  return lines;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace

TEST(CliInspectKeys, StepsWithKeysOnATerminalAndQuitsWithTheVerdict) {
  PtyRun run(withModel(keysDemoInspect("")), 80, 24);
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.waitFor("q quit", 0, 180)) << "no key-driven screen\n" << run.out();
  EXPECT_TRUE(contains(run.out(), "\x1b[?1049h")) << "the alternate screen";
  // The first screen fits 80x24, the verdict and the first check on top.
  const auto screen = lastScreen(run.out(), run.out().size());
  ASSERT_FALSE(screen.empty()) << run.out();
  EXPECT_LE(screen.size(), 24u) << run.out();
  for (const auto& l : screen) EXPECT_LE(screenColumns(l), 80u) << l;
  EXPECT_TRUE(contains(plain(screen.front()), "verdict: ")) << screen.front();
  std::string text;
  for (const auto& l : screen) text += plain(l) + "\n";
  EXPECT_TRUE(contains(text, "first check: layer 2's cache source and append")) << text;
  EXPECT_TRUE(contains(text, "shown: request 0, step 0 (prefill), layer 2")) << text;
  EXPECT_TRUE(contains(plain(screen.back()), "n/p step")) << "the keys, on the last line\n" << text;

  size_t mark = run.out().size();
  run.send("n");
  EXPECT_TRUE(run.waitFor("shown: request 0, step 1, layer 2", mark, 30)) << run.out().substr(mark);
  mark = run.out().size();
  run.send("\x1b[C");  // right arrow
  EXPECT_TRUE(run.waitFor("shown: request 0, step 2, layer 2", mark, 30)) << run.out().substr(mark);
  mark = run.out().size();
  run.send("\x1b[D");  // left arrow
  EXPECT_TRUE(run.waitFor("shown: request 0, step 1, layer 2", mark, 30)) << run.out().substr(mark);
  mark = run.out().size();
  run.send("j");  // layer 2 is the demo's last
  EXPECT_TRUE(run.waitFor("layer 2 is the last", mark, 30)) << run.out().substr(mark);
  mark = run.out().size();
  run.send("k");
  EXPECT_TRUE(run.waitFor("shown: request 0, step 1, layer 1", mark, 30)) << run.out().substr(mark);
  for (const auto& l : lastScreen(run.out(), run.out().size()))
    EXPECT_LE(screenColumns(l), 80u) << l;

  mark = run.out().size();
  run.send("q");
  EXPECT_EQ(run.exitCode(30), 1) << "the audit's verdict: divergent\n" << run.out().substr(mark);
  const std::string after = plain(run.out().substr(mark));
  const size_t left = run.out().find("\x1b[?1049l", mark);
  ASSERT_NE(left, std::string::npos) << "the terminal is restored\n" << after;
  const std::string rest = plain(run.out().substr(left));
  EXPECT_TRUE(contains(rest, "verdict: ")) << "the last screen stays\n" << after;
  EXPECT_TRUE(contains(rest, "shown: request 0, step 1, layer 1")) << after;
}

TEST(CliInspectKeys, NoKeysPrintsOnceOnATerminal) {
  auto args = withModel(keysDemoInspect(""));
  args.push_back("--no-keys");
  PtyRun run(args, 80, 24);
  ASSERT_TRUE(run.started());
  EXPECT_EQ(run.exitCode(180), 1) << run.out();
  EXPECT_FALSE(contains(run.out(), "\x1b[?1049h")) << run.out();
  const std::string out = plain(run.out());
  EXPECT_TRUE(contains(out, "first check: layer 2's cache source and append")) << out;
  // Progress lines on stderr come first; the view itself fits 80x24.
  const size_t from = out.find("KV Scope inspect");
  ASSERT_NE(from, std::string::npos) << out;
  size_t lines = 0;
  for (size_t i = from, start = from; i < out.size(); ++i)
    if (out[i] == '\n') {
      ++lines;
      const std::string line = out.substr(start, i - start);
      EXPECT_LE(screenColumns(line.substr(0, line.find('\r'))), 80u) << line;
      start = i + 1;
    }
  EXPECT_LE(lines, 24u) << out.substr(from);
}
