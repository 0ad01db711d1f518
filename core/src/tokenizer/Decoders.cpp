#include "tokenizer/Decoders.hpp"

#include "tokenizer/ByteLevel.hpp"
#include "tokenizer/Normalizers.hpp"
#include "tokenizer/Regex.hpp"
#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  for (const auto& t : decodeChain(std::move(tokens))) out += t;
  return out;
}

namespace {

class ByteLevelDec final : public Decoder {
 public:
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    std::string bytes;
    const ByteLevel& table = ByteLevel::instance();
    for (const auto& t : tokens) {
      if (auto b = table.decodeToken(t)) bytes += *b;
      else bytes += t;  // not byte-level (e.g. an added token): its own bytes
    }
    return {utf8Lossy(bytes)};
  }
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(char32_t replacement, bool prepends) : replacement_(replacement), prepends_(prepends) {}
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (char32_t c : codePoints(tokens[i])) {
        if (c == replacement_) {
          // tokenizers drops every replacement character of the first token.
          if (!(i == 0 && prepends_)) out += ' ';
        } else {
          appendUtf8(out, c);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  bool prepends_;
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      std::size_t prev = 0;
      for (const auto& [b, e] : regex_->findAll(t)) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

class ByteFallbackDec final : public Decoder {
 public:
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    std::size_t pendingCount = 0;
    auto flush = [&]() {
      if (pendingCount == 0) return;
      if (findInvalidUtf8(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (std::size_t i = 0; i < pendingCount; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pendingCount = 0;
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        const int hi = hexValue(t[3]), lo = hexValue(t[4]);
        if (hi >= 0 && lo >= 0) {
          pending += static_cast<char>(hi * 16 + lo);
          ++pendingCount;
          continue;
        }
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    return out;
  }
};

class FuseDec final : public Decoder {
 public:
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDec final : public Decoder {
 public:
  StripDec(char32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      const auto cps = codePoints(t);
      std::size_t b = 0;
      while (b < start_ && b < cps.size() && cps[b] == content_) ++b;
      std::size_t e = cps.size();
      for (std::size_t i = 0; i < stop_ && e > b && cps[e - 1] == content_; ++i) --e;
      std::string out;
      for (std::size_t i = b; i < e; ++i) appendUtf8(out, cps[i]);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class BpeDec final : public Decoder {
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string with = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      std::size_t pos = 0;
      while (!suffix_.empty()) {
        const std::size_t hit = tokens[i].find(suffix_, pos);
        if (hit == std::string::npos) break;
        out.append(tokens[i], pos, hit - pos);
        out += with;
        pos = hit + suffix_.size();
      }
      out.append(tokens[i], pos, std::string::npos);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string suffix_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decodeChain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decodeChain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t singleChar(const JsonFields& jf, const std::string& s, const std::string& field) {
  char32_t cp = 0;
  if (s.empty() || decodeUtf8(s, 0, cp) != s.size()) jf.fail(field, "expected a single character");
  return cp;
}

}  // namespace

std::unique_ptr<Decoder> makeByteLevelDecoder() { return std::make_unique<ByteLevelDec>(); }

std::unique_ptr<Decoder> makeDecoder(const JsonFields& jf, const Json& spec, const std::string& path) {
  const std::string type = jf.str(spec, path, "type");
  if (type == "ByteLevel") return makeByteLevelDecoder();
  if (type == "Metaspace") {
    const char32_t rep = singleChar(jf, jf.str(spec, path, "replacement", "\xE2\x96\x81"),
                                    JsonFields::join(path, "replacement"));
    bool prepends = jf.boolean(spec, path, "add_prefix_space", true);
    if (const auto s = jf.optStr(spec, path, "prepend_scheme")) prepends = *s != "never";
    return std::make_unique<MetaspaceDec>(rep, prepends);
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDec>(makePattern(jf, spec, path), jf.str(spec, path, "content"));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") {
    const char32_t c = singleChar(jf, jf.str(spec, path, "content"), JsonFields::join(path, "content"));
    const int64_t start = jf.integer(spec, path, "start", 0);
    const int64_t stop = jf.integer(spec, path, "stop", 0);
    if (start < 0 || stop < 0) jf.fail(path, "start and stop must not be negative");
    return std::make_unique<StripDec>(c, static_cast<std::size_t>(start), static_cast<std::size_t>(stop));
  }
  if (type == "BPEDecoder") return std::make_unique<BpeDec>(jf.str(spec, path, "suffix", "</w>"));
  if (type == "Sequence") {
    const std::string listPath = JsonFields::join(path, "decoders");
    const Json& list = jf.require(spec, path, "decoders");
    jf.requireArray(list, listPath);
    const JsonFields::Nesting nesting(jf, listPath);
    std::vector<std::unique_ptr<Decoder>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      parts.push_back(makeDecoder(jf, list[i], JsonFields::index(listPath, i)));
    }
    return std::make_unique<SequenceDec>(std::move(parts));
  }
  jf.fail(JsonFields::join(path, "type"),
          "unsupported decoder '" + type +
              "' (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, "
              "Sequence)");
}

}  // namespace kvscope::tok
