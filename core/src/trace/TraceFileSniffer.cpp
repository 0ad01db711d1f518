#include "kvscope/TraceFileSniffer.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string_view>

#include "kvscope/MlxPromptCacheTrace.hpp"

namespace kvscope {

namespace {

constexpr uint64_t kMaxSniffedHeader = 16ull << 20;  // never read more of a header
constexpr std::size_t kPrefix = 4096;

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

FileSniff make(FileKind kind, std::string looksLike, std::string detail = {}) {
  FileSniff s;
  s.kind = kind;
  s.looksLike = std::move(looksLike);
  s.detail = std::move(detail);
  return s;
}

// Printable ASCII, common whitespace or UTF-8 multi-byte sequences only.
bool looksLikeText(std::string_view bytes) {
  if (bytes.empty()) return false;
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
      ++i;
      continue;
    }
    int follow = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
    if (c >= 0xF8) follow = -1;
    if (follow < 0) return false;
    if (i + static_cast<std::size_t>(follow) >= bytes.size()) return true;  // cut at the prefix end
    for (int k = 1; k <= follow; ++k)
      if ((static_cast<unsigned char>(bytes[i + static_cast<std::size_t>(k)]) & 0xC0) != 0x80)
        return false;
    i += static_cast<std::size_t>(follow) + 1;
  }
  return true;
}

// The value of "format" in a safetensors header's __metadata__, found by text (the header
// is not parsed: it may be megabytes of a model's tensor table). "" when there is none.
std::string metadataFormat(const std::string& header) {
  const auto meta = header.find("\"__metadata__\"");
  if (meta == std::string::npos) return {};
  static const std::regex format(R"re("format"\s*:\s*"([^"\\]{0,64})")re");
  std::smatch m;
  const auto begin = header.begin() + static_cast<std::ptrdiff_t>(meta);
  if (std::regex_search(begin, header.end(), m, format)) return m[1].str();
  return {};
}

FileSniff sniffSafetensors(std::ifstream& in, uint64_t headerLen, uint64_t size) {
  if (headerLen == 0 || headerLen > size - 8)
    return make(FileKind::Binary, "binary data of an unknown kind");
  const uint64_t want = std::min(headerLen, kMaxSniffedHeader);
  std::string header(static_cast<std::size_t>(want), '\0');
  in.seekg(8);
  in.read(header.data(), static_cast<std::streamsize>(want));
  header.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  const auto first = header.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || header[first] != '{')
    return make(FileKind::Binary, "binary data of an unknown kind");
  const std::string format = metadataFormat(header);
  if (format == "kvtrace") return make(FileKind::KvTrace, "a .kvtrace trace");
  // A writer may put the (large) trace document before "format": its keys still say trace.
  if (format.empty() && header.size() == kMaxSniffedHeader &&
      header.find("\"kvtrace_version\"") != std::string::npos)
    return make(FileKind::KvTrace, "a .kvtrace trace");
  const bool tensors = header.find("\"data_offsets\"") != std::string::npos;
  if (!tensors && format.empty()) return make(FileKind::Binary, "binary data of an unknown kind");
  return make(FileKind::Safetensors, "a safetensors file of tensors (model weights?)",
              format.empty()
                  ? "its header has no __metadata__ \"format\": \"kvtrace\""
                  : "its safetensors metadata says format \"" + format + "\", not \"kvtrace\"");
}

}  // namespace

FileSniff describeFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return make(FileKind::Missing, "a path that does not exist");
  if (fs::is_directory(st)) return make(FileKind::Directory, "a folder");
  if (isMlxPromptCacheFile(path))
    return make(FileKind::MlxCache, "an mlx-lm prompt cache (save_prompt_cache)",
                "read as a run of the model given with it");
  const uint64_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in)
    return make(FileKind::Unreadable, "a file that cannot be read", "permission denied?");
  if (size == 0) return make(FileKind::Empty, "an empty file", "0 bytes");

  std::string prefix(std::min<uint64_t>(size, kPrefix), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  in.clear();
  const std::string_view p(prefix);

  if (startsWith(p, "\x1f\x8b"))
    return make(FileKind::Gzip, "a gzip archive", "decompress it first?");
  if (startsWith(p, "PK\x03\x04"))
    return make(FileKind::Zip, "a zip archive (a PyTorch .pt/.bin checkpoint?)");
  if (startsWith(p, "GGUF")) return make(FileKind::Gguf, "a GGUF model (llama.cpp)");
  if (startsWith(p, "qsgg") || startsWith(p, "\xd8\x3c\x14\xaf"))
    return make(FileKind::LlamaState, "a llama.cpp sequence state (a saved slot)",
                "read as a run of the model given with it");
  if (startsWith(p, "\x93NUMPY")) return make(FileKind::Numpy, "a NumPy .npy array");
  if (startsWith(p, "\x89HDF")) return make(FileKind::Hdf5, "an HDF5 file");
  if (startsWith(p, "\x89PNG") || startsWith(p, "\xFF\xD8\xFF"))
    return make(FileKind::Image, "an image");
  if (startsWith(p, "%PDF")) return make(FileKind::Pdf, "a PDF document");
  if (startsWith(p,
                 "\x7f"
                 "ELF"))
    return make(FileKind::Executable, "a program (ELF executable)");
  if (p.size() >= 2 && static_cast<unsigned char>(p[0]) == 0x80 && p[1] >= 2 && p[1] <= 5)
    return make(FileKind::Pickle, "a Python pickle (a PyTorch checkpoint?)");

  // safetensors: 8-byte little-endian header length, then a JSON object.
  if (p.size() >= 9) {
    uint64_t headerLen = 0;
    for (int i = 7; i >= 0; --i)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(p[static_cast<std::size_t>(i)]);
    const auto c = static_cast<unsigned char>(p[8]);
    if (headerLen > 1 && headerLen <= size - 8 && (c == '{' || c == ' '))
      return sniffSafetensors(in, headerLen, size);
  }

  const auto first = p.find_first_not_of(" \t\r\n");
  const bool bom = startsWith(p, "\xEF\xBB\xBF");
  const std::string_view body = bom ? p.substr(3) : p;
  const auto firstChar = body.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && firstChar != std::string_view::npos &&
      (body[firstChar] == '{' || body[firstChar] == '[') && looksLikeText(body))
    return make(FileKind::Json, "JSON");
  if (looksLikeText(body)) return make(FileKind::Text, "text");
  return make(FileKind::Binary, "binary data of an unknown kind");
}

std::string notATraceMessage(const FileSniff& s) {
  if (s.isTrace()) return {};
  if (s.kind == FileKind::Missing) return "no such file";
  std::string out = "this is not a .kvtrace file (it looks like " + s.looksLike + ")";
  if (s.kind == FileKind::Directory)
    out = "this is a folder, not a .kvtrace file (open a folder as the model directory)";
  if (!s.detail.empty()) out += ": " + s.detail;
  if (s.kind == FileKind::Safetensors || s.kind == FileKind::Json)
    out += "; to audit a model, open its folder as the model directory";
  if (s.kind == FileKind::Safetensors || s.kind == FileKind::Json || s.kind == FileKind::Zip ||
      s.kind == FileKind::Pickle || s.kind == FileKind::Numpy)
    out += "; traces are recorded by kvscope-cli generate --trace OUT.kvtrace or kvscope-record";
  return out;
}

}  // namespace kvscope
