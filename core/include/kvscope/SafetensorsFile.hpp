// A read-only, memory-mapped safetensors file (https://github.com/huggingface/safetensors):
// 8-byte little-endian header length N, N bytes of JSON header, then the data buffer.
// Every header field is validated on open; errors name the file and the tensor/field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/FloatTensor.hpp"

namespace kvscope {

enum class SafetensorsDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

/// "F32" etc. -> dtype; throws InputError(file, field, ...) for anything else.
SafetensorsDtype parseSafetensorsDtype(const std::string& s, const std::string& file,
                                       const std::string& field);
std::string safetensorsDtypeName(SafetensorsDtype d);
size_t safetensorsDtypeSize(SafetensorsDtype d);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offset into the data buffer
  uint64_t end = 0;    // one past the last byte
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws InputError for: a file shorter than 8 bytes, a
  /// header length beyond the file, invalid JSON, an unknown dtype, a shape/offset size
  /// mismatch, offsets out of range or overlapping, non-string metadata values.
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  /// Throws InputError(path, name, "missing tensor") when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// Pointer to the entry's bytes inside the mapping (valid while this object lives).
  const uint8_t* bytes(const SafetensorsEntry& e) const;
  /// The tensor converted to float32 (F64/F32/F16/BF16/integers/bool). Copies.
  FloatTensor readFloat(const std::string& name) const;
  /// Elements [first, first + count) of the tensor (row-major) converted to float32 into
  /// `out`; throws InputError naming the tensor when the range is outside it.
  void readFloatElements(const std::string& name, size_t first, size_t count, float* out) const;
  /// Integer tensors (I64/I32/I16/I8/U32/U16/U8/BOOL) as int64.
  std::vector<int64_t> readInt64(const std::string& name) const;
  /// A U64 tensor (e.g. 64-bit checksums) as stored.
  std::vector<uint64_t> readUint64(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* map_ = nullptr;  // whole file, read-only mapping
  size_t mapSize_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer (map_ + 8 + N)
  size_t dataSize_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kvscope
