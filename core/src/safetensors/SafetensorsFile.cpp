#include "kvscope/SafetensorsFile.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "util/MappedFile.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;  // the reference library's limit

struct DtypeName {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeName kDtypes[] = {
    {SafetensorsDtype::F64, "F64", 8},   {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::F16, "F16", 2},   {SafetensorsDtype::BF16, "BF16", 2},
    {SafetensorsDtype::I64, "I64", 8},   {SafetensorsDtype::I32, "I32", 4},
    {SafetensorsDtype::I16, "I16", 2},   {SafetensorsDtype::I8, "I8", 1},
    {SafetensorsDtype::U64, "U64", 8},   {SafetensorsDtype::U32, "U32", 4},
    {SafetensorsDtype::U16, "U16", 2},   {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::BOOL, "BOOL", 1},
};

template <typename T>
T loadUnaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

SafetensorsDtype parseSafetensorsDtype(const std::string& s, const std::string& file,
                                       const std::string& field) {
  for (const auto& d : kDtypes)
    if (s == d.name) return d.dtype;
  throw InputError(file, field,
                   "unknown dtype '" + s + "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL)");
}

std::string safetensorsDtypeName(SafetensorsDtype dt) {
  for (const auto& d : kDtypes)
    if (d.dtype == dt) return d.name;
  return "?";
}

size_t safetensorsDtypeSize(SafetensorsDtype dt) {
  for (const auto& d : kDtypes)
    if (d.dtype == dt) return d.size;
  return 0;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  size_t mapped = 0;
  f->map_ = detail::mapWholeFile(path, 8, "header length",
                                 "a safetensors file starts with an 8-byte header length (truncated file?)", mapped);
  f->mapSize_ = mapped;
  const auto size = static_cast<uint64_t>(mapped);

  const uint64_t headerLen = loadUnaligned<uint64_t>(f->map_);  // little-endian hosts only
  if (headerLen > size - 8) {
    throw InputError(path, "header length",
                     "header claims " + std::to_string(headerLen) + " bytes but only " +
                         std::to_string(size - 8) + " follow (truncated or not safetensors)");
  }
  if (headerLen > kMaxHeaderBytes)
    throw InputError(path, "header length", "header of " + std::to_string(headerLen) +
                                                " bytes exceeds the 100 MB limit");
  const char* hb = reinterpret_cast<const char*>(f->map_ + 8);
  const nlohmann::json header =
      parseUntrustedJson(std::string_view(hb, static_cast<std::size_t>(headerLen)), path, "header");
  if (!header.is_object()) throw InputError(path, "header", "expected a JSON object");
  f->data_ = f->map_ + 8 + headerLen;
  f->dataSize_ = size - 8 - headerLen;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) throw InputError(path, "__metadata__", "expected an object");
      for (auto m2 = it->begin(); m2 != it->end(); ++m2) {
        if (!m2->is_string())
          throw InputError(path, "__metadata__." + m2.key(), "metadata values must be strings");
        f->metadata_[m2.key()] = m2->get<std::string>();
      }
      continue;
    }
    const auto& t = *it;
    if (!t.is_object()) throw InputError(path, name, "tensor entry must be an object");
    SafetensorsEntry e;
    e.name = name;
    if (!t.contains("dtype") || !t["dtype"].is_string())
      throw InputError(path, name + ".dtype", "missing or not a string");
    e.dtype = parseSafetensorsDtype(t["dtype"].get<std::string>(), path, name + ".dtype");
    if (!t.contains("shape") || !t["shape"].is_array())
      throw InputError(path, name + ".shape", "missing or not an array");
    uint64_t numel = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned())
        throw InputError(path, name + ".shape", "dimensions must be non-negative integers");
      auto v = d.get<uint64_t>();
      // Each dimension must fit an int64 on its own too: a zero elsewhere keeps numel small.
      if (v > (uint64_t{1} << 62) ||
          (v != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / v))
        throw InputError(path, name + ".shape", "shape is too large");
      numel *= v;
      e.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = t.contains("data_offsets") ? t["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw InputError(path, name + ".data_offsets", "expected [begin, end] byte offsets");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      throw InputError(path, name + ".data_offsets", "begin " + std::to_string(e.begin) +
                                                         " is after end " + std::to_string(e.end));
    if (e.end > f->dataSize_)
      throw InputError(path, name + ".data_offsets",
                       "end " + std::to_string(e.end) + " is beyond the data buffer of " +
                           std::to_string(f->dataSize_) + " bytes (truncated file?)");
    const uint64_t expected = numel * safetensorsDtypeSize(e.dtype);
    if (e.end - e.begin != expected)
      throw InputError(path, name + ".data_offsets",
                       "holds " + std::to_string(e.end - e.begin) + " bytes but shape and dtype " +
                           "need " + std::to_string(expected));
    f->entries_.emplace(name, std::move(e));
  }
  // Offsets must not overlap (the format also requires them to cover the buffer; gaps are
  // tolerated since some writers pad).
  std::vector<const SafetensorsEntry*> byOffset;
  for (const auto& [n, e] : f->entries_) byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(), [](auto* a, auto* b) {
    return a->begin < b->begin || (a->begin == b->begin && a->end < b->end);
  });
  for (size_t i = 1; i < byOffset.size(); ++i) {
    const auto* prev = byOffset[i - 1];
    const auto* cur = byOffset[i];
    if (cur->begin < prev->end && cur->end > cur->begin)
      throw InputError(path, cur->name + ".data_offsets",
                       "overlaps tensor '" + prev->name + "' (bytes " + std::to_string(cur->begin) +
                           ".." + std::to_string(prev->end) + ")");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  detail::unmapFile(map_, mapSize_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [n, e] : entries_) out.push_back(n);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return entries_.count(name) > 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_, name, "missing tensor");
  return it->second;
}

const uint8_t* SafetensorsFile::bytes(const SafetensorsEntry& e) const { return data_ + e.begin; }

FloatTensor SafetensorsFile::readFloat(const std::string& name) const {
  const auto& e = entry(name);
  FloatTensor out;
  out.shape = e.shape;
  out.data.resize(static_cast<size_t>(e.numel()));
  readFloatElements(name, 0, out.data.size(), out.data.data());
  return out;
}

void SafetensorsFile::readFloatElements(const std::string& name, size_t first, size_t count, float* out) const {
  const auto& e = entry(name);
  const auto numel = static_cast<size_t>(e.numel());
  if (first > numel || count > numel - first)
    throw InputError(path_, name, "elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                      ") are outside the tensor's " + std::to_string(numel));
  const uint8_t* p = bytes(e) + first * safetensorsDtypeSize(e.dtype);
  if (e.dtype == SafetensorsDtype::F32) {  // little-endian host: the bytes are the floats
    if (count) std::memcpy(out, p, count * sizeof(float));
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    float v = 0;
    switch (e.dtype) {
      case SafetensorsDtype::F64: v = static_cast<float>(loadUnaligned<double>(p + 8 * i)); break;
      case SafetensorsDtype::F32: v = loadUnaligned<float>(p + 4 * i); break;
      case SafetensorsDtype::F16: v = halfToFloat(loadUnaligned<uint16_t>(p + 2 * i)); break;
      case SafetensorsDtype::BF16: v = bfloat16ToFloat(loadUnaligned<uint16_t>(p + 2 * i)); break;
      case SafetensorsDtype::I64: v = static_cast<float>(loadUnaligned<int64_t>(p + 8 * i)); break;
      case SafetensorsDtype::I32: v = static_cast<float>(loadUnaligned<int32_t>(p + 4 * i)); break;
      case SafetensorsDtype::I16: v = static_cast<float>(loadUnaligned<int16_t>(p + 2 * i)); break;
      case SafetensorsDtype::I8: v = static_cast<float>(static_cast<int8_t>(p[i])); break;
      case SafetensorsDtype::U64: v = static_cast<float>(loadUnaligned<uint64_t>(p + 8 * i)); break;
      case SafetensorsDtype::U32: v = static_cast<float>(loadUnaligned<uint32_t>(p + 4 * i)); break;
      case SafetensorsDtype::U16: v = static_cast<float>(loadUnaligned<uint16_t>(p + 2 * i)); break;
      case SafetensorsDtype::U8:
      case SafetensorsDtype::BOOL: v = static_cast<float>(p[i]); break;
    }
    out[i] = v;
  }
}

std::vector<int64_t> SafetensorsFile::readInt64(const std::string& name) const {
  const auto& e = entry(name);
  const auto n = static_cast<size_t>(e.numel());
  std::vector<int64_t> out(n);
  const uint8_t* p = bytes(e);
  for (size_t i = 0; i < n; ++i) {
    switch (e.dtype) {
      case SafetensorsDtype::I64: out[i] = loadUnaligned<int64_t>(p + 8 * i); break;
      case SafetensorsDtype::I32: out[i] = loadUnaligned<int32_t>(p + 4 * i); break;
      case SafetensorsDtype::I16: out[i] = loadUnaligned<int16_t>(p + 2 * i); break;
      case SafetensorsDtype::I8: out[i] = static_cast<int8_t>(p[i]); break;
      case SafetensorsDtype::U32: out[i] = loadUnaligned<uint32_t>(p + 4 * i); break;
      case SafetensorsDtype::U16: out[i] = loadUnaligned<uint16_t>(p + 2 * i); break;
      case SafetensorsDtype::U8:
      case SafetensorsDtype::BOOL: out[i] = p[i]; break;
      default:
        throw InputError(path_, name, "expected an integer tensor, found " +
                                          safetensorsDtypeName(e.dtype));
    }
  }
  return out;
}

std::vector<uint64_t> SafetensorsFile::readUint64(const std::string& name) const {
  const auto& e = entry(name);
  if (e.dtype != SafetensorsDtype::U64)
    throw InputError(path_, name, "expected a U64 tensor, found " + safetensorsDtypeName(e.dtype));
  const auto n = static_cast<size_t>(e.numel());
  std::vector<uint64_t> out(n);
  const uint8_t* p = bytes(e);
  for (size_t i = 0; i < n; ++i) out[i] = loadUnaligned<uint64_t>(p + 8 * i);
  return out;
}

}  // namespace kvscope
