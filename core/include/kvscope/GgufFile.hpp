// A read-only, memory-mapped GGUF file (llama.cpp's model format, versions 2 and 3:
// ggml/docs/gguf.md): magic "GGUF", version, tensor count, metadata count, the metadata
// key/value pairs, the tensor infos (name, dimensions innermost first, ggml type, offset),
// then the tensor data at general.alignment (default 32). Untrusted input: every count,
// length and offset is checked against the bytes that are there before anything is sized
// by it; errors name the file and the key or tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvscope {

/// One metadata value. Scalars keep their kind; arrays hold their elements.
struct GgufValue {
  enum class Kind { U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64 };
  Kind kind = Kind::U32;
  uint64_t u = 0;   // unsigned kinds and Bool
  int64_t i = 0;    // signed kinds
  double f = 0.0;   // F32, F64
  std::string s;    // String
  Kind elementKind = Kind::U32;  // Array
  std::vector<GgufValue> items;  // Array
  bool isInteger() const;
  bool isNumber() const;
  /// Integer kinds as int64 (a U64 above INT64_MAX is not an integer here).
  int64_t asInt() const;
  double asNumber() const;
  static const char* kindName(Kind k);
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first: the innermost (row) length
  uint32_t type = 0;          // ggml_type (GgmlBlocks.hpp)
  uint64_t offset = 0;        // from the start of the data section
  uint64_t size = 0;          // bytes (0 for a type KV Scope does not know)
  int64_t numel() const;
};

class GgufFile {
 public:
  /// Maps and validates `path`. Throws InputError(path, key or tensor, what) for a bad magic,
  /// an unsupported version, counts or lengths beyond the file, an unknown value type,
  /// duplicate keys or tensors, more than 4 dimensions, a tensor whose bytes lie outside the
  /// data section or overlap another's, or an offset off the alignment.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t fileSize() const { return mapSize_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  /// The value of `key`, which must exist and be an integer (string, number): InputError
  /// naming the key otherwise.
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  const std::string& string(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;
  /// The tensor's bytes inside the mapping (valid while this object lives); InputError when
  /// its ggml type is one KV Scope cannot read.
  const uint8_t* bytes(const GgufTensorInfo& t) const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  const uint8_t* map_ = nullptr;
  size_t mapSize_ = 0;
  uint64_t dataStart_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensorIndex_;
};

}  // namespace kvscope
