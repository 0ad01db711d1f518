// kvscope-cli: the headless face of KV Scope (CI, scripts). Exit codes: 0 success/clean,
// 1 divergent audit, 2 usage or input error.
#include <iostream>

#include "CliCommands.hpp"
#include "kvscope/BuildInfo.hpp"
#include "kvscope/Error.hpp"

int main(int argc, char** argv) {
  using namespace kvscope;
  CLI::App app{"KV Scope: find where cached LLM generation leaves the uncached reference"};
  app.require_subcommand(0, 1);
  bool showVersion = false;
  app.add_flag("--version", showVersion, "Print versions and the BLAS library in use");

  cli::CliContext ctx;
  cli::registerPolicyCommand(app, ctx);
  cli::registerMakeDemoCommand(app, ctx);
  cli::registerTokenizeCommand(app, ctx);
  cli::registerAuditCommand(app, ctx);
  cli::registerReferenceCommand(app, ctx);
  cli::registerGenerateCommand(app, ctx);
  cli::registerInspectCommand(app, ctx);

  // Start-up check: LibTorch's Debian build falls back to the reference BLAS without
  // libopenblas0-pthread, and matrix products then run ~45x slower.
  app.preparse_callback([](size_t) {
    const BuildInfo info = BuildInfo::detect();
    if (!info.optimizedBlas)
      std::cerr << "warning: LibTorch uses " << (info.blasLibrary.empty() ? "no BLAS found" : info.blasLibrary)
                << " (reference BLAS, ~45x slower matrix products); install libopenblas0-pthread\n";
  });
  try {
    app.parse(argc, argv);
    if (showVersion) {
      std::cout << BuildInfo::detect().describe();
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::cerr << app.help();
      return 2;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return ctx.exitCode;
}
