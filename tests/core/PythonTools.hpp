// Running tools/*.py from tests: /usr/bin/python3 (Debian's, with numpy), shell quoting,
// captured output, and a skip when the Python side is unavailable.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace kvscope::test {

namespace fs = std::filesystem;

inline fs::path tempDir() {
  auto d = fs::temp_directory_path() / ("kvscope-pytrace-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

inline const char* kPython = "/usr/bin/python3";

inline fs::path toolsDir() { return fs::weakly_canonical(fs::path(KVSCOPE_FIXTURES_DIR) / ".." / ".." / "tools"); }

inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct RunResult {
  int status = -1;
  std::string output;
};

// Runs a shell command, capturing stdout and stderr.
inline RunResult run(const std::string& cmd) {
  RunResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline RunResult python(const std::string& script, const std::string& args) {
  return run(std::string(kPython) + " " + quote((toolsDir() / script).string()) + " " + args);
}

// Empty when the Python side can run, otherwise why not.
inline std::string pythonUnavailable() {
  if (!fs::exists(kPython)) return std::string(kPython) + " not found";
  if (run(std::string(kPython) + " -c 'import numpy'").status != 0)
    return std::string(kPython) + " has no numpy (apt-get install python3-numpy)";
  if (!fs::exists(toolsDir() / "kvtrace.py")) return "tools/kvtrace.py not found at " + toolsDir().string();
  return "";
}

#define SKIP_WITHOUT_PYTHON()                                                  \
  do {                                                                         \
    const std::string why = pythonUnavailable();                               \
    if (!why.empty()) GTEST_SKIP() << "Python trace tools unavailable: " << why; \
  } while (0)

}  // namespace kvscope::test
