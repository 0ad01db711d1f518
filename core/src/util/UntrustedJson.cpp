#include "util/UntrustedJson.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "kvscope/Error.hpp"

namespace kvscope {

using nlohmann::json;

namespace {

// Where the parser is: one frame per open object or array.
struct Frame {
  bool array = false;
  int64_t index = -1;  // arrays: the element being read
  std::string key;     // objects: the member being read
};

std::string segment(const Frame& f, bool first) {
  if (f.array) return "[" + std::to_string(f.index < 0 ? 0 : f.index) + "]";
  std::string k = f.key.size() > 64 ? f.key.substr(0, 64) + "..." : f.key;
  return first ? k : "." + k;
}

// The JSON path of the value being opened, shortened in the middle when deep.
std::string pathOf(const std::vector<Frame>& stack) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < stack.size(); ++i) parts.push_back(segment(stack[i], i == 0));
  const std::size_t head = 4, tail = 2;
  std::string out;
  if (parts.size() <= head + tail + 1) {
    for (const auto& p : parts) out += p;
  } else {
    for (std::size_t i = 0; i < head; ++i) out += parts[i];
    out += "...(" + std::to_string(parts.size() - head - tail) + " more levels)...";
    for (std::size_t i = parts.size() - tail; i < parts.size(); ++i) out += parts[i];
  }
  if (!out.empty() && out[0] == '.') out.erase(0, 1);
  return out.empty() ? std::string("(root)") : out;
}

std::string lineColumn(std::string_view text, std::size_t pos) {
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

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
std::size_t utf8Length(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

void previewInto(const json& v, std::string& out, std::size_t budget, int depth) {
  if (out.size() >= budget) return;
  switch (v.type()) {
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      const std::size_t room = budget - out.size();
      if (s.size() <= room) {
        out += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        std::size_t cut = room;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        out += json(s.substr(0, cut)).dump(-1, ' ', false, json::error_handler_t::replace);
        out.insert(out.size() - 1, "...");
      }
      return;
    }
    case json::value_t::array:
    case json::value_t::object: {
      const bool arr = v.is_array();
      if (depth >= 3 && !v.empty()) {
        out += arr ? "[...]" : "{...}";
        return;
      }
      out += arr ? '[' : '{';
      std::size_t n = 0;
      for (auto it = v.begin(); it != v.end(); ++it, ++n) {
        if (out.size() >= budget) {
          out += "...";
          break;
        }
        if (n) out += ", ";
        if (!arr) previewInto(json(it.key()), out, budget, depth + 1), out += ": ";
        previewInto(*it, out, budget, depth + 1);
      }
      out += arr ? ']' : '}';
      return;
    }
    default:
      out += v.dump();
  }
}

}  // namespace

json parseUntrustedJson(std::string_view text, const std::string& file, const std::string& field,
                        int maxDepth) {
  std::vector<Frame> stack;
  const json::parser_callback_t limit = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (!stack.empty() && stack.back().array) ++stack.back().index;
        if (static_cast<int>(stack.size()) >= maxDepth)
          throw InputError(
              file, pathOf(stack),
              "JSON nested deeper than " + std::to_string(maxDepth) +
                  " levels (the limit for any JSON KV Scope reads; see docs/limits.md)");
        stack.push_back(Frame{event == json::parse_event_t::array_start, -1, {}});
        break;
      case json::parse_event_t::key:
        if (!stack.empty())
          stack.back().key = parsed.is_string() ? parsed.get<std::string>() : std::string();
        break;
      case json::parse_event_t::value:
        if (!stack.empty() && stack.back().array) ++stack.back().index;
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::parse_error& e) {
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string detail = "invalid JSON";
    if (at >= text.size()) detail += " (file ends early: truncated?)";
    const std::string msg = e.what();
    const auto syntax = msg.find("syntax error");
    detail += ": " + (syntax != std::string::npos ? msg.substr(syntax) : msg);
    if (!field.empty()) detail += " (" + lineColumn(text, at) + ")";
    throw InputError(file, field.empty() ? lineColumn(text, at) : field, detail);
  } catch (const json::exception& e) {
    throw InputError(file, field, std::string("invalid JSON: ") + e.what());
  }
}

json parseUntrustedJsonFile(const std::string& path, int maxDepth) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path, "", "cannot read file");
  return parseUntrustedJson(ss.str(), path, "", maxDepth);
}

std::optional<int64_t> jsonInt64(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

std::optional<uint64_t> jsonUint64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

std::optional<int64_t> doubleToInt64(double d) {
  // [-2^63, 2^63): both bounds are exact doubles.
  if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 ||
      d >= 9223372036854775808.0)
    return std::nullopt;
  return static_cast<int64_t>(d);
}

std::string jsonPreview(const json& v, std::size_t maxChars) {
  std::string out;
  previewInto(v, out, maxChars, 0);
  return out;
}

std::string printableText(std::string_view text, std::size_t maxBytes) {
  std::string out;
  out.reserve(std::min(text.size(), maxBytes) + 16);
  std::size_t i = 0;
  while (i < text.size()) {
    if (out.size() >= maxBytes) {
      out += "... (" + std::to_string(text.size() - i) + " more bytes)";
      break;
    }
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8Length(text, i);
    if (n == 0 || (b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace kvscope
