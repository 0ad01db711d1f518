#include "util/MappedFile.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

const uint8_t* mapWholeFile(const std::string& path, size_t minSize, const std::string& field,
                            const std::string& tooShort, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path, "", "not a regular file");
  }
  size = static_cast<size_t>(st.st_size);
  if (size < minSize) {
    ::close(fd);
    throw InputError(path, field, "file is " + std::to_string(size) + " bytes; " + tooShort);
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw InputError(path, "", std::string("mmap failed: ") + std::strerror(errno));
  return static_cast<const uint8_t*>(m);
}

void unmapFile(const uint8_t* data, size_t size) {
  if (data) ::munmap(const_cast<uint8_t*>(data), size);
}

}  // namespace kvscope::detail
