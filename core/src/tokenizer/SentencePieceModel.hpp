// The contents of a SentencePiece `tokenizer.model` (a serialized ModelProto from
// sentencepiece_model.proto), parsed without libsentencepiece/protobuf.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::tok {

struct SentencePieceModel {
  enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  enum ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0;
    int type = kNormal;
  };

  std::vector<Piece> pieces;
  // TrainerSpec (defaults as in the .proto)
  int modelType = kUnigram;
  bool byteFallback = false;
  bool treatWhitespaceAsSuffix = false;
  int32_t unkId = 0;
  int32_t bosId = 1;
  int32_t eosId = 2;
  int32_t padId = -1;
  // NormalizerSpec
  std::string normalizerName;
  std::string precompiledCharsmap;
  bool addDummyPrefix = true;
  bool removeExtraWhitespaces = true;
  bool escapeWhitespaces = true;

  /// Reads and parses `path`; malformed or truncated files are InputErrors naming the file
  /// and the field (e.g. "ModelProto.pieces[12]").
  static SentencePieceModel load(const std::string& path);
  static SentencePieceModel parse(const std::string& bytes, const std::string& file);
};

}  // namespace kvscope::tok
