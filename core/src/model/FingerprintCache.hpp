// The checkpoint fingerprint (SHA-256 over config.json and every weight file, each
// preceded by its file name; tools/kvtrace.py's model_fingerprint computes the same) and
// its cache in the user's cache directory, so a multi-gigabyte checkpoint is hashed once,
// not on every run.
//
// The cache holds one entry per checkpoint directory: for every hashed file its path,
// size, mtime (ns), inode and device, and the fingerprint. An entry is used only when every
// file still matches; any change (rewritten, replaced, touched, a shard added or removed)
// recomputes it. Location: $KVSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kvscope, else
// ~/.cache/kvscope (subfolder fingerprints/). A cache that cannot be read or written is
// ignored: the fingerprint is then computed every time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::detail {

struct FileStamp {
  std::string path;
  uint64_t size = 0;
  int64_t mtimeNs = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  bool operator==(const FileStamp& o) const {
    return path == o.path && size == o.size && mtimeNs == o.mtimeNs && inode == o.inode &&
           device == o.device;
  }
};

/// Stats `path`; throws InputError when it cannot.
FileStamp stampOf(const std::string& path);

/// The fingerprint of `paths` in order, hashed now. `progress(done, total)` (bytes) is
/// called every few hundred MB when given.
std::string computeFingerprint(const std::vector<std::string>& paths,
                               const std::function<void(uint64_t, uint64_t)>& progress = {});

/// The cache directory in use (may not exist yet); empty when no home is known.
std::string fingerprintCacheDir();

/// The cached fingerprint of the checkpoint `directory` when every stamp still matches.
std::optional<std::string> cachedFingerprint(const std::string& directory,
                                             const std::vector<FileStamp>& stamps);
/// Stores it (atomically: a temporary file renamed into place); errors are ignored.
void storeFingerprint(const std::string& directory, const std::vector<FileStamp>& stamps,
                      const std::string& fingerprint);

}  // namespace kvscope::detail
