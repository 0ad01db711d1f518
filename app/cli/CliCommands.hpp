// Each kvscope-cli subcommand lives in commands/<Name>Command.cpp and registers itself
// here. Callbacks throw kvscope::InputError / UsageError for bad input (exit 2) and set
// `CliContext::exitCode` for verdicts (e.g. 1 = divergent audit).
#pragma once

#include <CLI/CLI.hpp>

namespace kvscope::cli {

struct CliContext {
  int exitCode = 0;
};

void registerPolicyCommand(CLI::App& app, CliContext& ctx);  // commands/PolicyCommand.cpp
/// `make-demo DIR`: writes a random-weight HuggingFace checkpoint (commands/MakeDemoCommand.cpp).
void registerMakeDemoCommand(CLI::App& app, CliContext& ctx);
void registerTokenizeCommand(CLI::App& app, CliContext& ctx);
void registerAuditCommand(CLI::App& app, CliContext& ctx);  // commands/AuditCommand.cpp
/// `reference`: one uncached pass over a prompt (commands/ReferenceCommand.cpp).
void registerReferenceCommand(CLI::App& app, CliContext& ctx);
/// `generate`: the built-in cached engine with faults, recording a trace
/// (commands/GenerateCommand.cpp).
void registerGenerateCommand(CLI::App& app, CliContext& ctx);
/// `inspect`: one step of the audit drawn in the terminal from kvscope::Inspector
/// (commands/InspectCommand.cpp).
void registerInspectCommand(CLI::App& app, CliContext& ctx);

}  // namespace kvscope::cli
