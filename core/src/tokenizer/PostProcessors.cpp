#include "tokenizer/PostProcessors.hpp"

#include <vector>

namespace kvscope::tok {

namespace {

// One template item: either the sequence itself or a run of special-token ids/tokens.
struct Piece {
  bool isSequence = false;
  Encoding special;
};

class TemplatePost final : public PostProcessor {
 public:
  explicit TemplatePost(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}
  Encoding process(Encoding encoding) const override {
    Encoding out;
    for (const auto& p : pieces_) {
      const Encoding& src = p.isSequence ? encoding : p.special;
      out.ids.insert(out.ids.end(), src.ids.begin(), src.ids.end());
      out.tokens.insert(out.tokens.end(), src.tokens.begin(), src.tokens.end());
    }
    return out;
  }

 private:
  std::vector<Piece> pieces_;
};

class IdentityPost final : public PostProcessor {
 public:
  Encoding process(Encoding encoding) const override { return encoding; }
};

class SequencePost final : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  Encoding process(Encoding encoding) const override {
    for (const auto& p : parts_) encoding = p->process(std::move(encoding));
    return encoding;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// The ids/tokens of special token `name` from TemplateProcessing's "special_tokens" map.
Encoding lookupSpecial(const JsonFields& jf, const Json& spec, const std::string& path,
                       const std::string& name, const std::string& usedAt) {
  const Json* specials = jf.find(spec, "special_tokens");
  const Json* entry = specials ? jf.find(*specials, name) : nullptr;
  if (entry == nullptr) {
    jf.fail(usedAt, "special token '" + name + "' is not defined in " +
                        JsonFields::join(path, "special_tokens"));
  }
  const std::string ePath = JsonFields::join(JsonFields::join(path, "special_tokens"), name);
  const Json& ids = jf.require(*entry, ePath, "ids");
  const Json& tokens = jf.require(*entry, ePath, "tokens");
  jf.requireArray(ids, JsonFields::join(ePath, "ids"));
  jf.requireArray(tokens, JsonFields::join(ePath, "tokens"));
  if (ids.size() != tokens.size()) jf.fail(ePath, "ids and tokens differ in length");
  Encoding e;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    e.ids.push_back(jf.asInteger(ids[i], JsonFields::index(JsonFields::join(ePath, "ids"), i)));
    e.tokens.push_back(jf.asString(tokens[i], JsonFields::index(JsonFields::join(ePath, "tokens"), i)));
  }
  return e;
}

std::unique_ptr<PostProcessor> makeTemplate(const JsonFields& jf, const Json& spec, const std::string& path) {
  const std::string singlePath = JsonFields::join(path, "single");
  const Json& single = jf.require(spec, path, "single");
  std::vector<Piece> pieces;
  if (single.is_string()) {
    // "[CLS] $A [SEP]" (the form users pass to the Python constructor).
    const std::string s = single.get<std::string>();
    std::size_t pos = 0;
    while (pos < s.size()) {
      const std::size_t end = s.find(' ', pos);
      std::string item = s.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      pos = end == std::string::npos ? s.size() : end + 1;
      if (item.empty()) continue;
      const auto colon = item.rfind(':');
      if (colon != std::string::npos && colon > 0) item = item.substr(0, colon);
      Piece p;
      if (item == "$A" || item == "$" || item == "$0") {
        p.isSequence = true;
      } else if (!item.empty() && item[0] == '$') {
        jf.fail(singlePath, "a single-sequence template can only use $A");
      } else {
        p.special = lookupSpecial(jf, spec, path, item, singlePath);
      }
      pieces.push_back(std::move(p));
    }
    return std::make_unique<TemplatePost>(std::move(pieces));
  }
  jf.requireArray(single, singlePath);
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string itemPath = JsonFields::index(singlePath, i);
    jf.requireObject(single[i], itemPath);
    Piece p;
    if (const Json* seq = jf.find(single[i], "Sequence")) {
      const std::string id = jf.str(*seq, JsonFields::join(itemPath, "Sequence"), "id");
      if (id != "A") jf.fail(JsonFields::join(itemPath, "Sequence.id"), "a single-sequence template can only use A");
      p.isSequence = true;
    } else if (const Json* sp = jf.find(single[i], "SpecialToken")) {
      const std::string spPath = JsonFields::join(itemPath, "SpecialToken");
      p.special = lookupSpecial(jf, spec, path, jf.str(*sp, spPath, "id"), JsonFields::join(spPath, "id"));
    } else {
      jf.fail(itemPath, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    pieces.push_back(std::move(p));
  }
  return std::make_unique<TemplatePost>(std::move(pieces));
}

// BertProcessing / RobertaProcessing: "cls": [token, id], "sep": [token, id].
Encoding tokenPair(const JsonFields& jf, const Json& spec, const std::string& path, const std::string& key) {
  const std::string p = JsonFields::join(path, key);
  const Json& v = jf.require(spec, path, key);
  if (!v.is_array() || v.size() != 2) jf.fail(p, "expected [token, id]");
  Encoding e;
  e.tokens.push_back(jf.asString(v[0], JsonFields::index(p, 0)));
  e.ids.push_back(jf.asInteger(v[1], JsonFields::index(p, 1)));
  return e;
}

}  // namespace

std::unique_ptr<PostProcessor> makePostProcessor(const JsonFields& jf, const Json& spec,
                                                 const std::string& path) {
  const std::string type = jf.str(spec, path, "type");
  if (type == "TemplateProcessing") return makeTemplate(jf, spec, path);
  if (type == "ByteLevel") return std::make_unique<IdentityPost>();
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    std::vector<Piece> pieces(3);
    pieces[0].special = tokenPair(jf, spec, path, "cls");
    pieces[1].isSequence = true;
    pieces[2].special = tokenPair(jf, spec, path, "sep");
    return std::make_unique<TemplatePost>(std::move(pieces));
  }
  if (type == "Sequence") {
    const std::string listPath = JsonFields::join(path, "processors");
    const Json& list = jf.require(spec, path, "processors");
    jf.requireArray(list, listPath);
    const JsonFields::Nesting nesting(jf, listPath);
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      parts.push_back(makePostProcessor(jf, list[i], JsonFields::index(listPath, i)));
    }
    return std::make_unique<SequencePost>(std::move(parts));
  }
  jf.fail(JsonFields::join(path, "type"),
          "unsupported post-processor '" + type +
              "' (supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)");
}

}  // namespace kvscope::tok
