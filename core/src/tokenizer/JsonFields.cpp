#include "tokenizer/JsonFields.hpp"

#include "kvscope/Error.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope::tok {

namespace {
std::string typeName(const Json& v) { return v.type_name(); }

}  // namespace

Json JsonFields::parseFile(const std::string& path) { return parseUntrustedJsonFile(path); }

JsonFields::Nesting::Nesting(const JsonFields& jf, const std::string& path) : jf_(jf) {
  if (jf_.nesting_ >= limits::kPipelineNesting)
    jf_.fail(path, "Sequence nested more than " + std::to_string(limits::kPipelineNesting) +
                       " levels deep (the limit)");
  ++jf_.nesting_;
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
  const auto i = jsonInt64(v);
  if (!i) fail(path, "integer " + v.dump() + " is out of range");
  return *i;
}

int64_t JsonFields::asTokenId(const Json& v, const std::string& path) const {
  const int64_t id = asInteger(v, path);
  if (id < 0) fail(path, "token ids must not be negative, found " + std::to_string(id));
  if (id >= limits::kVocab)
    fail(path, "token id " + std::to_string(id) + " exceeds the limit of " +
                   std::to_string(limits::kVocab - 1));
  return id;
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
