#include "tokenizer/JsonFields.hpp"

#include <fstream>
#include <sstream>

#include "kvscope/Error.hpp"

namespace kvscope::tok {

namespace {
std::string typeName(const Json& v) { return v.type_name(); }

// Line and column (1-based) of byte offset `pos` in `text`.
std::string lineColumn(const std::string& text, std::size_t pos) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}
}  // namespace

Json JsonFields::parseFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string detail = "not valid JSON";
    if (at >= text.size()) detail += " (file ends early: truncated?)";
    std::string msg = e.what();
    const auto colon = msg.find("syntax error");
    if (colon != std::string::npos) detail += ": " + msg.substr(colon);
    throw InputError(path, lineColumn(text, at), detail);
  }
}

void JsonFields::fail(const std::string& field, const std::string& detail) const {
  throw InputError(file_, field, detail);
}

std::string JsonFields::join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string JsonFields::index(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const Json* JsonFields::find(const Json& obj, const std::string& key) const {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& JsonFields::require(const Json& obj, const std::string& path,
                                const std::string& key) const {
  requireObject(obj, path);
  const Json* v = find(obj, key);
  if (v == nullptr) fail(join(path, key), "required field is missing");
  return *v;
}

void JsonFields::requireObject(const Json& v, const std::string& path) const {
  if (!v.is_object()) fail(path.empty() ? "(root)" : path, "expected an object, found " + typeName(v));
}

void JsonFields::requireArray(const Json& v, const std::string& path) const {
  if (!v.is_array()) fail(path, "expected an array, found " + typeName(v));
}

std::string JsonFields::asString(const Json& v, const std::string& path) const {
  if (!v.is_string()) fail(path, "expected a string, found " + typeName(v));
  return v.get<std::string>();
}

int64_t JsonFields::asInteger(const Json& v, const std::string& path) const {
  if (!v.is_number_integer()) fail(path, "expected an integer, found " + typeName(v));
  return v.get<int64_t>();
}

std::string JsonFields::str(const Json& obj, const std::string& path, const std::string& key) const {
  return asString(require(obj, path, key), join(path, key));
}

std::string JsonFields::str(const Json& obj, const std::string& path, const std::string& key,
                            const std::string& fallback) const {
  const Json* v = find(obj, key);
  return v ? asString(*v, join(path, key)) : fallback;
}

std::optional<std::string> JsonFields::optStr(const Json& obj, const std::string& path,
                                              const std::string& key) const {
  const Json* v = find(obj, key);
  if (!v) return std::nullopt;
  return asString(*v, join(path, key));
}

bool JsonFields::boolean(const Json& obj, const std::string& path, const std::string& key,
                         bool fallback) const {
  const Json* v = find(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(join(path, key), "expected true or false, found " + typeName(*v));
  return v->get<bool>();
}

int64_t JsonFields::integer(const Json& obj, const std::string& path, const std::string& key) const {
  return asInteger(require(obj, path, key), join(path, key));
}

int64_t JsonFields::integer(const Json& obj, const std::string& path, const std::string& key,
                            int64_t fallback) const {
  const Json* v = find(obj, key);
  return v ? asInteger(*v, join(path, key)) : fallback;
}

}  // namespace kvscope::tok
