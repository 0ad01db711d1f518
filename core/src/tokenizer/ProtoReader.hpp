// A minimal protobuf wire-format reader (varint, fixed32, fixed64, length-delimited) with
// bounds checks: truncated or malformed input is an InputError naming the file, the
// message being read and the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope::tok {

class ProtoReader {
 public:
  enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

  struct Field {
    uint32_t number = 0;
    WireType wire = kVarint;
    uint64_t varint = 0;          // kVarint, and the raw bits of kFixed32/kFixed64
    std::string_view bytes;       // kLengthDelimited
    std::size_t offset = 0;       // file offset of the field's key

    float asFloat() const;        // kFixed32 as IEEE-754 float
    int32_t asInt32() const { return static_cast<int32_t>(static_cast<uint32_t>(varint)); }
    bool asBool() const { return varint != 0; }
  };

  /// `data` is the message; `baseOffset` its position in `file`; `context` names it
  /// ("ModelProto", "pieces[3]", ...).
  ProtoReader(std::string_view data, std::string file, std::string context, std::size_t baseOffset = 0);

  bool atEnd() const { return pos_ >= data_.size(); }
  Field next();
  /// A reader over a length-delimited field's payload.
  ProtoReader sub(const Field& f, std::string context) const;
  /// Fails (InputError) when `f` does not have wire type `expected`.
  void expectWire(const Field& f, WireType expected, const std::string& fieldName) const;
  [[noreturn]] void fail(const std::string& field, const std::string& detail) const;

 private:
  uint64_t readVarint();
  std::string_view data_;
  std::string file_;
  std::string context_;
  std::size_t base_;
  std::size_t pos_ = 0;
};

}  // namespace kvscope::tok
