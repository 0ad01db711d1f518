#include "kvscope/GgufFile.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "gguf/GgmlBlocks.hpp"
#include "kvscope/Error.hpp"
#include "util/MappedFile.hpp"

namespace kvscope {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read little-endian
constexpr size_t kMaxDims = 4;               // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 2;            // arrays of arrays: deeper ones are refused

// A cursor over the header bytes: every read checks what is left; errors name the file and
// the key or tensor being read.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* p, size_t n) : path_(path), p_(p), n_(n) {}
  size_t position() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  void need(uint64_t bytes, const std::string& field, const std::string& what) const {
    if (bytes > left())
      throw InputError(path_, field,
                       what + " needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(pos_) +
                           ", but the file has " + std::to_string(left()) + " left (truncated or not GGUF)");
  }
  template <typename T>
  T read(const std::string& field, const char* what) {
    need(sizeof(T), field, what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));  // little-endian hosts only
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& field) {
    const uint64_t len = read<uint64_t>(field, "a string length");
    need(len, field, "a string of " + std::to_string(len) + " bytes");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// The smallest encoding of one value of `kind` (the bound on an array's count).
size_t minimumSize(GgufValue::Kind k) {
  using K = GgufValue::Kind;
  switch (k) {
    case K::U8: case K::I8: case K::Bool: return 1;
    case K::U16: case K::I16: return 2;
    case K::U32: case K::I32: case K::F32: return 4;
    case K::U64: case K::I64: case K::F64: case K::String: return 8;
    case K::Array: return 12;
  }
  return 1;
}

GgufValue::Kind kindOf(uint32_t t, const std::string& path, const std::string& key) {
  if (t > 12)
    throw InputError(path, key, "value type " + std::to_string(t) + " is not a GGUF type (0-12)");
  return static_cast<GgufValue::Kind>(t);
}

GgufValue readValue(Cursor& c, GgufValue::Kind kind, const std::string& path, const std::string& key, int depth) {
  using K = GgufValue::Kind;
  GgufValue v;
  v.kind = kind;
  switch (kind) {
    case K::U8: v.u = c.read<uint8_t>(key, "a uint8"); break;
    case K::I8: v.i = c.read<int8_t>(key, "an int8"); break;
    case K::U16: v.u = c.read<uint16_t>(key, "a uint16"); break;
    case K::I16: v.i = c.read<int16_t>(key, "an int16"); break;
    case K::U32: v.u = c.read<uint32_t>(key, "a uint32"); break;
    case K::I32: v.i = c.read<int32_t>(key, "an int32"); break;
    case K::U64: v.u = c.read<uint64_t>(key, "a uint64"); break;
    case K::I64: v.i = c.read<int64_t>(key, "an int64"); break;
    case K::F32: v.f = c.read<float>(key, "a float32"); break;
    case K::F64: v.f = c.read<double>(key, "a float64"); break;
    case K::Bool: {
      const uint8_t b = c.read<uint8_t>(key, "a bool");
      if (b > 1) throw InputError(path, key, "bool value " + std::to_string(b) + " (expected 0 or 1)");
      v.u = b;
      break;
    }
    case K::String: v.s = c.string(key); break;
    case K::Array: {
      if (depth >= kMaxArrayDepth) throw InputError(path, key, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      v.elementKind = kindOf(c.read<uint32_t>(key, "an array's element type"), path, key);
      const uint64_t n = c.read<uint64_t>(key, "an array's length");
      // Bounded by the bytes left before anything is allocated.
      if (n > c.left() / minimumSize(v.elementKind))
        throw InputError(path, key, "an array of " + std::to_string(n) + " " + GgufValue::kindName(v.elementKind) +
                                        " values cannot fit in the " + std::to_string(c.left()) + " bytes left");
      v.items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) v.items.push_back(readValue(c, v.elementKind, path, key, depth + 1));
      break;
    }
  }
  return v;
}

}  // namespace

bool GgufValue::isInteger() const {
  switch (kind) {
    case Kind::U8: case Kind::U16: case Kind::U32: case Kind::I8: case Kind::I16: case Kind::I32:
    case Kind::I64: return true;
    case Kind::U64: return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    default: return false;
  }
}

bool GgufValue::isNumber() const { return isInteger() || kind == Kind::F32 || kind == Kind::F64; }

int64_t GgufValue::asInt() const {
  switch (kind) {
    case Kind::U8: case Kind::U16: case Kind::U32: case Kind::U64: return static_cast<int64_t>(u);
    default: return i;
  }
}

double GgufValue::asNumber() const {
  if (kind == Kind::F32 || kind == Kind::F64) return f;
  return static_cast<double>(asInt());
}

const char* GgufValue::kindName(Kind k) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  return names[static_cast<int>(k)];
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  size_t size = 0;
  f->map_ = detail::mapWholeFile(path, 24, "header", "a GGUF file starts with a 24-byte header (truncated file?)", size);
  f->mapSize_ = size;

  Cursor c(f->path_, f->map_, size);
  if (c.read<uint32_t>("magic", "the magic") != kGgufMagic)
    throw InputError(path, "magic", "not a GGUF file (the first four bytes are not \"GGUF\")");
  f->version_ = c.read<uint32_t>("version", "the version");
  if (f->version_ != 2 && f->version_ != 3)
    throw InputError(path, "version", "GGUF version " + std::to_string(f->version_) +
                                          "; KV Scope reads versions 2 and 3 (version 1 predates 64-bit counts)");
  const uint64_t tensorCount = c.read<uint64_t>("tensor_count", "the tensor count");
  const uint64_t kvCount = c.read<uint64_t>("metadata_kv_count", "the metadata count");
  // Each pair needs at least a key length and a type (12 bytes), each tensor info at least
  // 8 + 4 + 4 + 8 bytes: counts beyond that are refused before anything is sized by them.
  if (kvCount > c.left() / 12)
    throw InputError(path, "metadata_kv_count", std::to_string(kvCount) + " pairs cannot fit in the file");
  for (uint64_t k = 0; k < kvCount; ++k) {
    const std::string field = "metadata pair " + std::to_string(k);
    std::string key = c.string(field);
    const auto kind = kindOf(c.read<uint32_t>(key, "a value type"), path, key);
    GgufValue v = readValue(c, kind, path, key, 0);
    if (!f->metadata_.emplace(key, std::move(v)).second) throw InputError(path, key, "key appears twice");
  }
  if (tensorCount > c.left() / 24)
    throw InputError(path, "tensor_count", std::to_string(tensorCount) + " tensor infos cannot fit in the file");
  uint64_t alignment = 32;
  if (const GgufValue* a = f->find("general.alignment")) {
    if (!a->isInteger() || a->asInt() <= 0 || (a->asInt() & (a->asInt() - 1)) != 0 || a->asInt() > (1 << 20))
      throw InputError(path, "general.alignment", "must be a power of two up to 1 MiB");
    alignment = static_cast<uint64_t>(a->asInt());
  }
  for (uint64_t t = 0; t < tensorCount; ++t) {
    GgufTensorInfo info;
    info.name = c.string("tensor info " + std::to_string(t));
    const uint32_t nd = c.read<uint32_t>(info.name, "the dimension count");
    if (nd == 0 || nd > kMaxDims)
      throw InputError(path, info.name, std::to_string(nd) + " dimensions (GGUF allows 1 to 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = c.read<uint64_t>(info.name, "a dimension");
      if (n == 0 || n > (uint64_t{1} << 40) || numel > (uint64_t{1} << 48) / n)
        throw InputError(path, info.name, "dimension " + std::to_string(d) + " is " + std::to_string(n) +
                                              " (zero or too large for any model)");
      numel *= n;
      info.dims.push_back(static_cast<int64_t>(n));
    }
    info.type = c.read<uint32_t>(info.name, "the ggml type");
    info.offset = c.read<uint64_t>(info.name, "the data offset");
    if (info.offset % alignment != 0)
      throw InputError(path, info.name, "data offset " + std::to_string(info.offset) + " is not a multiple of general.alignment " +
                                            std::to_string(alignment));
    if (const detail::GgmlType* g = detail::ggmlType(info.type)) {
      if (info.dims[0] % g->blockElements != 0)
        throw InputError(path, info.name, "row length " + std::to_string(info.dims[0]) + " is not a multiple of " +
                                              g->name + "'s block of " + std::to_string(g->blockElements));
      info.size = numel / static_cast<uint64_t>(g->blockElements) * static_cast<uint64_t>(g->blockBytes);
    }
    if (f->tensorIndex_.count(info.name)) throw InputError(path, info.name, "tensor appears twice");
    f->tensorIndex_[info.name] = f->tensors_.size();
    f->tensors_.push_back(std::move(info));
  }
  f->dataStart_ = (c.position() + alignment - 1) / alignment * alignment;
  if (f->dataStart_ > size && !f->tensors_.empty())
    throw InputError(path, "tensor data", "the data section would start past the end of the file");
  // Bytes inside the data section, no two tensors overlapping.
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> spans;
  for (const auto& t : f->tensors_) {
    if (t.size == 0) continue;
    const uint64_t room = size - f->dataStart_;
    if (t.offset > room || t.size > room - t.offset)
      throw InputError(path, t.name, "its " + std::to_string(t.size) + " bytes at offset " + std::to_string(t.offset) +
                                         " lie past the end of the file (truncated download?)");
    spans.push_back({t.offset, &t});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].first + spans[i - 1].second->size > spans[i].first)
      throw InputError(path, spans[i].second->name, "its bytes overlap " + spans[i - 1].second->name + "'s");
  return f;
}

GgufFile::~GgufFile() {
  detail::unmapFile(map_, mapSize_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

int64_t GgufFile::integer(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw InputError(path_, key, "missing (needed to read the model)");
  if (!v->isInteger()) throw InputError(path_, key, std::string("is a ") + GgufValue::kindName(v->kind) + ", expected an integer");
  return v->asInt();
}

double GgufFile::number(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw InputError(path_, key, "missing (needed to read the model)");
  if (!v->isNumber()) throw InputError(path_, key, std::string("is a ") + GgufValue::kindName(v->kind) + ", expected a number");
  return v->asNumber();
}

const std::string& GgufFile::string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw InputError(path_, key, "missing (needed to read the model)");
  if (v->kind != GgufValue::Kind::String)
    throw InputError(path_, key, std::string("is a ") + GgufValue::kindName(v->kind) + ", expected a string");
  return v->s;
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::bytes(const GgufTensorInfo& t) const {
  if (t.size == 0)
    throw InputError(path_, t.name, "ggml type " + detail::ggmlTypeName(t.type) +
                                        " is not one KV Scope reads (" + detail::ggmlReadableTypes() + ")");
  return map_ + dataStart_ + t.offset;
}

}  // namespace kvscope
