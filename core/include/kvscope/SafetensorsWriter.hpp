// Writes a safetensors file: tensors in insertion order, an 8-byte aligned header, and a
// string->string `__metadata__` map. The file is written to a temporary name in the same
// folder and renamed into place, so a failed write never leaves a half file behind.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvscope/FloatTensor.hpp"
#include "kvscope/SafetensorsFile.hpp"

namespace kvscope {

class SafetensorsWriter {
 public:
  void setMetadata(const std::string& key, const std::string& value);
  /// Adds a float32 tensor stored as `dtype` (F32, F16 or BF16; rounded to nearest even).
  void addFloat(const std::string& name, const FloatTensor& t,
                SafetensorsDtype dtype = SafetensorsDtype::F32);
  void addFloat(const std::string& name, const std::vector<int64_t>& shape, const float* data,
                SafetensorsDtype dtype = SafetensorsDtype::F32);
  void addInt64(const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& values);
  void addUint64(const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<uint64_t>& values);
  /// Raw bytes already in `dtype`'s little-endian layout.
  void addRaw(const std::string& name, SafetensorsDtype dtype, const std::vector<int64_t>& shape,
              std::vector<uint8_t> bytes);
  size_t tensorCount() const { return tensors_.size(); }
  /// Throws InputError(path, "", reason) when the file cannot be written. Refuses to
  /// replace an existing file unless `overwrite` is true.
  void write(const std::string& path, bool overwrite = true) const;

 private:
  struct Pending {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// float <-> half / bfloat16 conversions (round to nearest even), shared by reader/writer.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);
float bfloat16ToFloat(uint16_t b);

}  // namespace kvscope
