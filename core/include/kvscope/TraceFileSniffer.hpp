// What a file looks like, from its first bytes: a .kvtrace trace, another safetensors file
// (model weights), JSON, text, an archive, a pickle... Cheap (reads the 8-byte header length
// and at most the first 16 MiB of a safetensors header; never the tensors), so front ends
// call it the moment a user picks a file, and put "this is not a .kvtrace file (it looks
// like JSON)" before the parser's detail. No exceptions: a file that cannot be read is a kind.
#pragma once

#include <string>

namespace kvscope {

enum class FileKind {
  Missing,      // no such file
  Directory,    // a folder (a model directory is a folder)
  Unreadable,   // exists, cannot be opened
  Empty,        // 0 bytes
  KvTrace,      // safetensors whose __metadata__ says "format": "kvtrace"
  Safetensors,  // safetensors without the kvtrace metadata (model weights, other tensors)
  Json,         // starts with '{' or '[' (config.json, tokenizer.json, JSON lines)
  Text,         // readable text (a prompt, CSV, a log)
  Gzip,
  Zip,     // also PyTorch .pt / .bin checkpoints
  Pickle,  // Python pickle (older PyTorch .bin)
  Gguf,    // llama.cpp model
  LlamaState,  // llama.cpp sequence state ('ggsq': a saved slot), a trace read with the model
  MlxCache,    // mlx-lm prompt cache (safetensors naming cache classes), read with the model
  Numpy,   // .npy
  Hdf5,    // .h5 (Keras)
  Image,   // PNG, JPEG
  Pdf,
  Executable,  // ELF
  Binary,      // anything else
};

struct FileSniff {
  FileKind kind = FileKind::Binary;
  /// What the file looks like, in a user's words: "JSON", "a safetensors file of tensors
  /// (model weights?)", "a folder", "an empty file", "a .kvtrace trace".
  std::string looksLike;
  /// Why, in one short clause (e.g. "its safetensors metadata has format \"pt\", not
  /// \"kvtrace\""); may be empty.
  std::string detail;
  /// A file the audit reads as a run: a .kvtrace, or a saved llama.cpp / mlx-lm cache (with
  /// --model).
  bool isTrace() const {
    return kind == FileKind::KvTrace || kind == FileKind::LlamaState || kind == FileKind::MlxCache;
  }
};

/// Looks at `path` without parsing it: the kind, and what it looks like in words.
FileSniff describeFile(const std::string& path);

/// "" when `path` looks like a .kvtrace trace; otherwise the sentence a user reads first,
/// e.g. "this is not a .kvtrace file (it looks like JSON)", followed by the sniff's detail
/// and, for model files, what to open instead.
std::string notATraceMessage(const FileSniff& sniff);
inline std::string notATraceMessage(const std::string& path) {
  return notATraceMessage(describeFile(path));
}

}  // namespace kvscope
