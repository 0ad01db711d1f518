// Runs the kvscope-cli binary (KVSCOPE_CLI_PATH) without a shell and captures its exit
// code, the signal that ended it (if any), stdout and stderr. Arguments are passed as
// given, so paths and prompts need no quoting.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

extern char** environ;

namespace kvscope::test {

struct CliRun {
  int exitCode = -1;  // -1 when the process did not exit normally
  int signal = 0;     // the signal that ended it, 0 when it exited
  std::string out;
  std::string err;

  bool exitedWith(int code) const { return signal == 0 && exitCode == code; }
};

inline std::ostream& operator<<(std::ostream& os, const CliRun& r) {
  os << "exit " << r.exitCode;
  if (r.signal != 0) os << " (signal " << r.signal << ")";
  return os << "\n--- stdout ---\n" << r.out << "\n--- stderr ---\n" << r.err;
}

inline std::string readWholeFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// `env`: changes to this process's environment for the child, "NAME=value" to set and
/// "NAME" alone to unset.
inline CliRun runKvscopeCli(const std::vector<std::string>& args,
                            const std::vector<std::string>& env = {}) {
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  const fs::path base =
      fs::temp_directory_path() /
      ("kvscope-cli-run-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  const std::string outPath = base.string() + ".out", errPath = base.string() + ".err";

  std::vector<std::string> argv{KVSCOPE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, outPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    bool replaced = false;
    for (const auto& change : env) {
      const std::string name = change.substr(0, change.find('=')) + "=";
      replaced = replaced || var.compare(0, name.size(), name) == 0;
    }
    if (!replaced) vars.push_back(var);
  }
  for (const auto& change : env)
    if (change.find('=') != std::string::npos) vars.push_back(change);
  std::vector<char*> cenv;
  for (auto& v : vars) cenv.push_back(v.data());
  cenv.push_back(nullptr);

  CliRun r;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = "posix_spawn failed with " + std::to_string(rc);
    return r;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = readWholeFile(outPath);
  r.err = readWholeFile(errPath);
  std::error_code ec;
  fs::remove(outPath, ec);
  fs::remove(errPath, ec);
  return r;
}

}  // namespace kvscope::test
