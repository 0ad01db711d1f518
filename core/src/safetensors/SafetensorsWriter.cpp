#include "kvscope/SafetensorsWriter.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"

namespace kvscope {

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mant = x & 0x7fffffu;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow -> signed zero
    uint32_t m = mant | 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(half);
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      x = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void SafetensorsWriter::setMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::addFloat(const std::string& name, const FloatTensor& t,
                                 SafetensorsDtype dtype) {
  // An empty FloatTensor (no shape) would read as a one-element scalar it does not hold.
  if (static_cast<int64_t>(t.data.size()) != t.numel())
    throw std::invalid_argument("SafetensorsWriter::addFloat: tensor '" + name + "' holds " +
                                std::to_string(t.data.size()) + " values, not its shape's");
  addFloat(name, t.shape, t.data.data(), dtype);
}

void SafetensorsWriter::addFloat(const std::string& name, const std::vector<int64_t>& shape,
                                 const float* data, SafetensorsDtype dtype) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> bytes;
  switch (dtype) {
    case SafetensorsDtype::F32:
      bytes.resize(static_cast<size_t>(n) * 4);
      if (n) std::memcpy(bytes.data(), data, bytes.size());
      break;
    case SafetensorsDtype::F16:
    case SafetensorsDtype::BF16:
      bytes.resize(static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = dtype == SafetensorsDtype::F16 ? floatToHalf(data[i]) : floatToBfloat16(data[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default:
      throw std::invalid_argument("SafetensorsWriter::addFloat: dtype must be F32, F16 or BF16");
  }
  tensors_.push_back({name, dtype, shape, std::move(bytes)});
}

void SafetensorsWriter::addInt64(const std::string& name, const std::vector<int64_t>& shape,
                                 const std::vector<int64_t>& values) {
  std::vector<uint8_t> bytes(values.size() * 8);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  tensors_.push_back({name, SafetensorsDtype::I64, shape, std::move(bytes)});
}

void SafetensorsWriter::addUint64(const std::string& name, const std::vector<int64_t>& shape,
                                  const std::vector<uint64_t>& values) {
  std::vector<uint8_t> bytes(values.size() * 8);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  tensors_.push_back({name, SafetensorsDtype::U64, shape, std::move(bytes)});
}

void SafetensorsWriter::addRaw(const std::string& name, SafetensorsDtype dtype,
                               const std::vector<int64_t>& shape, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, dtype, shape, std::move(bytes)});
}

void SafetensorsWriter::write(const std::string& path, bool overwrite) const {
  namespace fs = std::filesystem;
  if (!overwrite && fs::exists(path))
    throw InputError(path, "", "refusing to overwrite an existing file");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    header[t.name] = {{"dtype", safetensorsDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string hs;
  try {
    hs = header.dump();
  } catch (const nlohmann::json::type_error&) {
    // A metadata value or tensor name that is not UTF-8: the header could not be read back.
    throw UsageError(std::string("cannot write ") + path +
                     ": a tensor name or metadata value is not valid UTF-8");
  }
  while ((hs.size() + 8) % 8 != 0) hs.push_back(' ');  // align the data buffer to 8 bytes
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", std::string("cannot write: ") + std::strerror(errno));
    const uint64_t n = hs.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (const auto& t : tensors_)
      out.write(reinterpret_cast<const char*>(t.bytes.data()),
                static_cast<std::streamsize>(t.bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw InputError(path, "", "write failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError(path, "", "cannot move the finished file into place: " + ec.message());
  }
}

}  // namespace kvscope
