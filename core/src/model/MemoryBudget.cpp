#include "kvscope/MemoryBudget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace kvscope {

namespace {

// "Key:   123 kB" lines of /proc/meminfo and /proc/self/status.
uint64_t procKilobytes(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream is(line.substr(key.size() + 1));
      uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

bool readNumber(const std::string& path, uint64_t& out) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return false;
  try {
    out = std::stoull(s);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The cgroup (v2) this process is in: "0::/path" in /proc/self/cgroup.
std::string cgroupDir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return {};
}

}  // namespace

std::string gigabytes(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  return buf;
}

MemoryAvailable MemoryAvailable::now() {
  MemoryAvailable a;
  a.ram = procKilobytes("/proc/meminfo", "MemAvailable");
  a.ramSource = "MemAvailable";
  if (a.ram == 0) a.ram = std::numeric_limits<uint64_t>::max();  // unknown: do not refuse
  // cgroup v2: the limit minus what the group holds that cannot be reclaimed (page cache
  // is reclaimable, so the group's file pages count as available).
  const std::string cg = cgroupDir();
  uint64_t max = 0, current = 0;
  if (!cg.empty() && readNumber(cg + "/memory.max", max) && readNumber(cg + "/memory.current", current)) {
    uint64_t file = 0;
    std::ifstream st(cg + "/memory.stat");
    std::string key;
    uint64_t v = 0;
    while (st >> key >> v)
      if (key == "file") file = v;
    const uint64_t used = current > file ? current - file : 0;
    const uint64_t left = max > used ? max - used : 0;
    if (left < a.ram) {
      a.ram = left;
      a.ramSource = "cgroup memory.max";
    }
  }
  struct rlimit rl {};
  a.addressSpace = std::numeric_limits<uint64_t>::max();
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t vm = procKilobytes("/proc/self/status", "VmSize");
    a.addressSpace = rl.rlim_cur > vm ? rl.rlim_cur - vm : 0;
  }
  return a;
}

std::string MemoryNeed::check(const MemoryAvailable& available, const std::string& what,
                              const std::string& advice) const {
  // Some head-room for the allocator, the libraries and the result's own copies.
  const uint64_t slack = std::max<uint64_t>(allocated() / 10, 16ull << 20);
  const std::string parts = "activations " + gigabytes(activations) + ", K/V " + gigabytes(kvCache) +
                            ", kept results " + gigabytes(kept) + ", the largest weight tensor " +
                            gigabytes(weightsWorkingSet) + "; the weights, " + gigabytes(weights) +
                            " mapped, can be read from the disk as a pass uses them";
  if (resident() + slack > available.ram)
    throw OutOfMemoryError(what + " needs about " + gigabytes(resident() + slack) + " of memory resident (" +
                           parts + ") but only " + gigabytes(available.ram) + " is available (" +
                           available.ramSource + "); " + advice);
  if (allocated() + slack > available.addressSpace)
    throw OutOfMemoryError(what + " needs about " + gigabytes(allocated() + slack) +
                           " more address space (" + parts + ") but the process limit (RLIMIT_AS) "
                           "leaves " + gigabytes(available.addressSpace) + "; " + advice);
  if (total() + slack <= available.ram) return {};
  // The page cache keeps what the run leaves of the memory; a pass reads every weight once.
  const uint64_t cached = available.ram - allocated() - slack;
  return what + ": the weights (" + gigabytes(weights) + ") do not all fit in the " +
         gigabytes(cached) + " of memory the run leaves (" + available.ramSource +
         "): each pass over them reads from the disk what the page cache could not keep, " +
         gigabytes(weights - std::min(weights, cached)) + " to all " + gigabytes(weights) +
         " (a pass reads the weights in order, so the cache may evict each part before the next pass)";
}

}  // namespace kvscope
