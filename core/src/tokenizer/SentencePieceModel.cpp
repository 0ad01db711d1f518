#include "tokenizer/SentencePieceModel.hpp"

#include <fstream>
#include <sstream>

#include "kvscope/Error.hpp"
#include "tokenizer/ProtoReader.hpp"

namespace kvscope::tok {

namespace {

SentencePieceModel::Piece parsePiece(ProtoReader r) {
  SentencePieceModel::Piece p;
  bool hasPiece = false;
  while (!r.atEnd()) {
    const auto f = r.next();
    switch (f.number) {
      case 1:
        r.expectWire(f, ProtoReader::kLengthDelimited, "piece");
        p.piece = std::string(f.bytes);
        hasPiece = true;
        break;
      case 2:
        r.expectWire(f, ProtoReader::kFixed32, "score");
        p.score = f.asFloat();
        break;
      case 3:
        r.expectWire(f, ProtoReader::kVarint, "type");
        p.type = f.asInt32();
        if (p.type < 1 || p.type > 6) r.fail("type", "unknown piece type " + std::to_string(p.type));
        break;
      default:
        break;  // extensions
    }
  }
  if (!hasPiece || p.piece.empty()) r.fail("piece", "missing or empty piece string");
  return p;
}

void parseTrainerSpec(ProtoReader r, SentencePieceModel& m) {
  while (!r.atEnd()) {
    const auto f = r.next();
    auto varint = [&](const char* name) {
      r.expectWire(f, ProtoReader::kVarint, name);
      return f;
    };
    switch (f.number) {
      case 3: m.modelType = varint("model_type").asInt32(); break;
      case 24: m.treatWhitespaceAsSuffix = varint("treat_whitespace_as_suffix").asBool(); break;
      case 35: m.byteFallback = varint("byte_fallback").asBool(); break;
      case 40: m.unkId = varint("unk_id").asInt32(); break;
      case 41: m.bosId = varint("bos_id").asInt32(); break;
      case 42: m.eosId = varint("eos_id").asInt32(); break;
      case 43: m.padId = varint("pad_id").asInt32(); break;
      default: break;  // training-only settings
    }
  }
}

void parseNormalizerSpec(ProtoReader r, SentencePieceModel& m) {
  while (!r.atEnd()) {
    const auto f = r.next();
    switch (f.number) {
      case 1:
        r.expectWire(f, ProtoReader::kLengthDelimited, "name");
        m.normalizerName = std::string(f.bytes);
        break;
      case 2:
        r.expectWire(f, ProtoReader::kLengthDelimited, "precompiled_charsmap");
        m.precompiledCharsmap = std::string(f.bytes);
        break;
      case 3:
        r.expectWire(f, ProtoReader::kVarint, "add_dummy_prefix");
        m.addDummyPrefix = f.asBool();
        break;
      case 4:
        r.expectWire(f, ProtoReader::kVarint, "remove_extra_whitespaces");
        m.removeExtraWhitespaces = f.asBool();
        break;
      case 5:
        r.expectWire(f, ProtoReader::kVarint, "escape_whitespaces");
        m.escapeWhitespaces = f.asBool();
        break;
      default:
        break;
    }
  }
}

}  // namespace

SentencePieceModel SentencePieceModel::parse(const std::string& bytes, const std::string& file) {
  SentencePieceModel m;
  ProtoReader r(bytes, file, "ModelProto");
  while (!r.atEnd()) {
    const auto f = r.next();
    switch (f.number) {
      case 1:
        r.expectWire(f, ProtoReader::kLengthDelimited, "pieces");
        m.pieces.push_back(parsePiece(r.sub(f, "ModelProto.pieces[" + std::to_string(m.pieces.size()) + "]")));
        break;
      case 2:
        r.expectWire(f, ProtoReader::kLengthDelimited, "trainer_spec");
        parseTrainerSpec(r.sub(f, "ModelProto.trainer_spec"), m);
        break;
      case 3:
        r.expectWire(f, ProtoReader::kLengthDelimited, "normalizer_spec");
        parseNormalizerSpec(r.sub(f, "ModelProto.normalizer_spec"), m);
        break;
      default:
        break;  // self_test_data, denormalizer_spec, extensions
    }
  }
  if (m.pieces.empty()) throw InputError(file, "ModelProto.pieces", "no pieces: not a SentencePiece model");
  auto checkId = [&](int32_t id, const char* name, bool optional) {
    if (optional && id < 0) return;
    if (id < 0 || static_cast<std::size_t>(id) >= m.pieces.size()) {
      throw InputError(file, std::string("ModelProto.trainer_spec.") + name,
                       "id " + std::to_string(id) + " is outside the " + std::to_string(m.pieces.size()) +
                           " pieces");
    }
  };
  checkId(m.unkId, "unk_id", false);
  checkId(m.bosId, "bos_id", true);
  checkId(m.eosId, "eos_id", true);
  checkId(m.padId, "pad_id", true);
  return m;
}

SentencePieceModel SentencePieceModel::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

}  // namespace kvscope::tok
