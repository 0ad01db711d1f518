// kvscope-cli tokenize --model DIR --text TEXT [--json] [--no-special]
// Encodes text with the tokenizer of a model directory (or a tokenizer file), as
// transformers' `tokenizer(text)` would.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "CliCommands.hpp"
#include "CliText.hpp"
#include "kvscope/Tokenizer.hpp"

namespace kvscope::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool json = false;
  bool noSpecial = false;
};

void runTokenize(const TokenizeOptions& o) {
  std::error_code ec;
  const auto tok = std::filesystem::is_regular_file(o.model, ec) ? Tokenizer::loadFile(o.model)
                                                                 : Tokenizer::loadFromDirectory(o.model);
  const Encoding enc = tok->encode(o.text, !o.noSpecial);
  if (o.json) {
    nlohmann::json out = {{"ids", enc.ids}, {"tokens", enc.tokens}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::cout << "tokenizer: " << tok->description() << "\n"
            << "tokens:    " << enc.ids.size() << "\n\n";
  std::cout << std::setw(6) << "index" << "  " << std::setw(8) << "id" << "  token\n";
  for (std::size_t i = 0; i < enc.ids.size(); ++i) {
    std::cout << std::setw(6) << i << "  " << std::setw(8) << enc.ids[i] << "  '"
              << printable(i < enc.tokens.size() ? enc.tokens[i] : std::string()) << "'\n";
  }
}

}  // namespace

void registerTokenizeCommand(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text with a model's tokenizer and show the ids");
  cmd->add_option("--model", opts->model,
                  "Model directory (tokenizer.json, vocab.json + merges.txt or tokenizer.model) or a "
                  "tokenizer file")
      ->required();
  cmd->add_option("--text", opts->text, "Text to encode")->required();
  cmd->add_flag("--json", opts->json, "Print {\"ids\": [...], \"tokens\": [...]} as JSON");
  cmd->add_flag("--no-special", opts->noSpecial, "Do not add BOS/EOS or template special tokens");
  cmd->callback([opts, &ctx]() {
    runTokenize(*opts);
    ctx.exitCode = 0;
  });
}

}  // namespace kvscope::cli
