// Reading tokenizer JSON files with errors that name the file and the field path
// (e.g. "pre_tokenizer.pretokenizers[0].pattern").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvscope::tok {

using Json = nlohmann::json;

class JsonFields {
 public:
  explicit JsonFields(std::string file) : file_(std::move(file)) {}

  /// Reads and parses a JSON file; a missing file or a syntax error is an InputError whose
  /// field names the line and column.
  static Json parseFile(const std::string& path);

  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& field, const std::string& detail) const;

  static std::string join(const std::string& path, const std::string& key);
  static std::string index(const std::string& path, std::size_t i);

  /// The member `key` of object `obj` (at `path`), which must exist and not be null.
  const Json& require(const Json& obj, const std::string& path, const std::string& key) const;
  /// The member or nullptr when absent or null.
  const Json* find(const Json& obj, const std::string& key) const;
  void requireObject(const Json& v, const std::string& path) const;
  void requireArray(const Json& v, const std::string& path) const;

  std::string str(const Json& obj, const std::string& path, const std::string& key) const;
  std::string str(const Json& obj, const std::string& path, const std::string& key,
                  const std::string& fallback) const;
  std::optional<std::string> optStr(const Json& obj, const std::string& path,
                                    const std::string& key) const;
  bool boolean(const Json& obj, const std::string& path, const std::string& key,
               bool fallback) const;
  int64_t integer(const Json& obj, const std::string& path, const std::string& key) const;
  int64_t integer(const Json& obj, const std::string& path, const std::string& key,
                  int64_t fallback) const;
  /// Held while a Sequence builds its parts: more than limits::kPipelineNesting at once is
  /// an InputError at `path`, so a hostile nesting cannot exhaust the stack.
  class Nesting {
   public:
    Nesting(const JsonFields& jf, const std::string& path);
    ~Nesting() { --jf_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    const JsonFields& jf_;
  };

  /// Value checks for an element already in hand.
  std::string asString(const Json& v, const std::string& path) const;
  int64_t asInteger(const Json& v, const std::string& path) const;
  /// A token id: an integer in [0, limits::kVocab).
  int64_t asTokenId(const Json& v, const std::string& path) const;

 private:
  std::string file_;
  mutable int nesting_ = 0;
};

}  // namespace kvscope::tok
