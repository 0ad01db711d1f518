// Shared by the fuzz targets: a private scratch directory, writing the input to a file the
// parser opens, and the two properties every target checks besides "no crash":
//  - a refusal is an InputError or UsageError (anything else escaping is a finding), and
//  - the file the parser was given is byte-identical afterwards.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "kvscope/Error.hpp"

namespace kvscope::fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    // tmpfs when there is one: the targets write every input to a file (about 7x faster).
    const char* base = std::getenv("KVSCOPE_FUZZ_TMP");
    const bool shm = std::filesystem::is_directory("/dev/shm");
    auto d = std::filesystem::path(base  ? base
                                   : shm ? "/dev/shm"
                                         : "/tmp") /
             ("kvscope-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void writeFile(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Runs `parse`; an InputError/UsageError is a refusal, anything else escaping aborts.
/// Returns true when `parse` returned normally.
inline bool accepts(const std::function<void()>& parse) {
  try {
    parse();
    return true;
  } catch (const InputError& e) {
    if (e.file().empty() && e.field().empty())
      finding(std::string("InputError without file or field: ") + e.what());
    return false;
  } catch (const UsageError&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string("unexpected exception (not an InputError): ") + e.what());
  }
}

/// The file at `path` must still hold exactly `size` bytes of `data`.
inline void expectUnchanged(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  const std::string now = readFile(path);
  if (now.size() != size ||
      (size > 0 && now.compare(0, size, reinterpret_cast<const char*>(data), size) != 0))
    finding("the parser changed its input file " + path.string());
}

}  // namespace kvscope::fuzz
