#include "model/FingerprintCache.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace fs = std::filesystem;

namespace {

std::string hex(const unsigned char* md, unsigned int len) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(digits[md[i] >> 4]);
    out.push_back(digits[md[i] & 15]);
  }
  return out;
}

std::string sha256Hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  return hex(md, len);
}

fs::path entryPath(const std::string& directory) {
  const std::string dir = fingerprintCacheDir();
  if (dir.empty()) return {};
  return fs::path(dir) / "fingerprints" / (sha256Hex(directory) + ".json");
}

nlohmann::json stampsJson(const std::vector<FileStamp>& stamps) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& s : stamps)
    files.push_back({{"path", s.path},
                     {"size", s.size},
                     {"mtime_ns", s.mtimeNs},
                     {"inode", s.inode},
                     {"device", s.device}});
  return files;
}

}  // namespace

FileStamp stampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InputError(path, "", std::string("cannot stat for fingerprinting: ") + std::strerror(errno));
  FileStamp s;
  s.path = path;
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtimeNs = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.device = static_cast<uint64_t>(st.st_dev);
  return s;
}

std::string computeFingerprint(const std::vector<std::string>& paths,
                               const std::function<void(uint64_t, uint64_t)>& progress) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  uint64_t total = 0, done = 0, reported = 0;
  if (progress)
    for (const auto& p : paths) total += stampOf(p).size;
  std::vector<char> buf(size_t{4} << 20);
  for (const auto& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(p, "", "cannot read for fingerprinting");
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    const std::string name = fs::path(p).filename().string();
    EVP_DigestUpdate(ctx.get(), name.data(), name.size());
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(fd);
        throw InputError(p, "", std::string("read failed while fingerprinting: ") + std::strerror(errno));
      }
      if (n == 0) break;
      EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
      done += static_cast<uint64_t>(n);
      if (progress && done - reported >= (uint64_t{256} << 20)) {
        reported = done;
        progress(done, total);
      }
    }
    ::close(fd);
  }
  if (progress) progress(total, total);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return hex(md, len);
}

std::string fingerprintCacheDir() {
  if (const char* d = std::getenv("KVSCOPE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "kvscope").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "kvscope").string();
  return {};
}

std::optional<std::string> cachedFingerprint(const std::string& directory,
                                             const std::vector<FileStamp>& stamps) {
  const fs::path p = entryPath(directory);
  if (p.empty()) return std::nullopt;
  std::ifstream in(p);
  if (!in) return std::nullopt;
  try {
    const auto doc = nlohmann::json::parse(in);
    if (doc.at("directory").get<std::string>() != directory) return std::nullopt;
    if (doc.at("files") != stampsJson(stamps)) return std::nullopt;
    const auto fp = doc.at("fingerprint").get<std::string>();
    if (fp.size() != 64) return std::nullopt;
    return fp;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // damaged entry: recompute (and overwrite it)
  }
}

void storeFingerprint(const std::string& directory, const std::vector<FileStamp>& stamps,
                      const std::string& fingerprint) {
  const fs::path p = entryPath(directory);
  if (p.empty()) return;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  nlohmann::json doc = {{"directory", directory},
                        {"files", stampsJson(stamps)},
                        {"fingerprint", fingerprint},
                        {"algorithm", "sha256 over file name + bytes, config.json then weights"}};
  const fs::path tmp = p.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << doc.dump(1) << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace kvscope::detail
