// A whole regular file mapped read-only (the weights and trace containers are read in place,
// never copied): the checks every format's open() makes before it parses a byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope::detail {

/// Maps `path` read-only. Throws InputError(path, "", ...) when it cannot be opened, is not a
/// regular file or cannot be mapped, and InputError(path, field, "file is N bytes; " +
/// `tooShort`) when it has fewer than `minSize` bytes. Release it with unmapFile.
const uint8_t* mapWholeFile(const std::string& path, size_t minSize, const std::string& field,
                            const std::string& tooShort, size_t& size);
void unmapFile(const uint8_t* data, size_t size);

}  // namespace kvscope::detail
