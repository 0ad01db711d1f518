#include "tokenizer/ProtoReader.hpp"

#include <cstring>

#include "kvscope/Error.hpp"

namespace kvscope::tok {

float ProtoReader::Field::asFloat() const {
  const auto bits = static_cast<uint32_t>(varint);
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

ProtoReader::ProtoReader(std::string_view data, std::string file, std::string context,
                         std::size_t baseOffset)
    : data_(data), file_(std::move(file)), context_(std::move(context)), base_(baseOffset) {}

void ProtoReader::fail(const std::string& field, const std::string& detail) const {
  throw InputError(file_, field.empty() ? context_ : context_ + "." + field, detail);
}

uint64_t ProtoReader::readVarint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) {
      fail("", "truncated varint at byte " + std::to_string(base_ + pos_) + " (file cut short?)");
    }
    const auto b = static_cast<unsigned char>(data_[pos_++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("", "malformed varint (more than 10 bytes) at byte " + std::to_string(base_ + pos_));
}

ProtoReader::Field ProtoReader::next() {
  Field f;
  f.offset = base_ + pos_;
  const uint64_t key = readVarint();
  f.number = static_cast<uint32_t>(key >> 3);
  const auto wire = static_cast<unsigned>(key & 7);
  if (f.number == 0) fail("", "invalid field number 0 at byte " + std::to_string(f.offset));
  const auto need = [this, &f](std::size_t n) {
    if (data_.size() - pos_ < n) {
      fail("", "field " + std::to_string(f.number) + " at byte " + std::to_string(f.offset) +
                   " needs " + std::to_string(n) + " bytes but only " +
                   std::to_string(data_.size() - pos_) + " remain (file truncated?)");
    }
  };
  switch (wire) {
    case kVarint:
      f.wire = kVarint;
      f.varint = readVarint();
      break;
    case kFixed64:
      f.wire = kFixed64;
      need(8);
      for (int i = 7; i >= 0; --i) f.varint = (f.varint << 8) | static_cast<unsigned char>(data_[pos_ + i]);
      pos_ += 8;
      break;
    case kFixed32:
      f.wire = kFixed32;
      need(4);
      for (int i = 3; i >= 0; --i) f.varint = (f.varint << 8) | static_cast<unsigned char>(data_[pos_ + i]);
      pos_ += 4;
      break;
    case kLengthDelimited: {
      f.wire = kLengthDelimited;
      const uint64_t len = readVarint();
      if (len > data_.size() - pos_) {
        fail("", "field " + std::to_string(f.number) + " at byte " + std::to_string(f.offset) +
                     " declares " + std::to_string(len) + " bytes but only " +
                     std::to_string(data_.size() - pos_) + " remain (file truncated?)");
      }
      f.bytes = data_.substr(pos_, static_cast<std::size_t>(len));
      pos_ += static_cast<std::size_t>(len);
      break;
    }
    default:
      fail("", "unsupported wire type " + std::to_string(wire) + " at byte " + std::to_string(f.offset) +
                   " (not a protobuf file?)");
  }
  return f;
}

ProtoReader ProtoReader::sub(const Field& f, std::string context) const {
  const std::size_t start = static_cast<std::size_t>(f.bytes.data() - data_.data());
  return ProtoReader(f.bytes, file_, std::move(context), base_ + start);
}

void ProtoReader::expectWire(const Field& f, WireType expected, const std::string& fieldName) const {
  if (f.wire != expected) {
    fail(fieldName, "unexpected wire type " + std::to_string(static_cast<int>(f.wire)) + " at byte " +
                        std::to_string(f.offset));
  }
}

}  // namespace kvscope::tok
