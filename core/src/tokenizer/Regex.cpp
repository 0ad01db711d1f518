#include "tokenizer/Regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

namespace {
std::string pcreMessage(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE errOffset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &errOffset, nullptr);
  if (impl_->code == nullptr) {
    throw std::invalid_argument("regular expression does not compile at offset " +
                                std::to_string(errOffset) + ": " + pcreMessage(err));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view subject) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (md == nullptr) throw std::bad_alloc();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t start = 0;
  while (start <= subject.size()) {
    int rc = pcre2_match(impl_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Very long runs can exhaust the JIT stack; the interpreter has its own limits.
      rc = pcre2_match(impl_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      throw std::runtime_error("regular expression match failed: " + pcreMessage(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= subject.size()) break;
      start = e + charLength(subject, e);
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::quote(std::string_view literal) {
  std::string out;
  out.reserve(literal.size() + 4);
  out += "\\Q";
  std::size_t pos = 0;
  while (pos < literal.size()) {
    const std::size_t hit = literal.find("\\E", pos);
    if (hit == std::string_view::npos) {
      out.append(literal.substr(pos));
      break;
    }
    out.append(literal.substr(pos, hit - pos));
    out += "\\E\\\\E\\Q";
    pos = hit + 2;
  }
  out += "\\E";
  return out;
}

}  // namespace kvscope::tok
