// nanochat: one binary, subcommands named after nanochat's scripts (docs/architecture.md 1).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "nanochat/cli/commands.h"
#include "nanochat/cli/script_names.h"
#include "nanochat/cli/suggest.h"
#include "nanochat/core/error.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/version.h"

int main(int argc, char** argv) {
  nanochat::use_default_wait_policy(argv);  // may re-execute this program (core/threads.h)
  CLI::App app{"nanochat.cpp: train nanochat-style GPT models on CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nanochat.cpp ") + nanochat::build_id());
  nanochat::cli::register_all(app);
  // nanochat's `-m scripts.X [--] --flag=value` form becomes our subcommand (cli/script_names.h)
  std::vector<std::string> words;
  try {
    words = nanochat::cli::rewrite_module_command(
        std::vector<std::string>(argv + 1, argv + argc), [&](const std::string& w) {
          const CLI::App& top = app;
          return !top.get_subcommands([&](const CLI::App* s) { return s->get_name() == w; }).empty();
        });
  } catch (const nanochat::Error& e) {
    std::fprintf(stderr, "nanochat: error: %s\n", e.what());
    return 2;
  }
  std::vector<char*> new_argv{argv[0]};
  for (std::string& w : words) new_argv.push_back(w.data());
  new_argv.push_back(nullptr);
  argc = static_cast<int>(new_argv.size()) - 1;
  argv = new_argv.data();
  // Unknown command or flag: name it, suggest the closest valid one, exit 2 (before CLI11, which
  // would say "A subcommand is required" or print the top-level help for `typo --help`).
  if (std::string bad = nanochat::cli::check_names(app, argc, argv); !bad.empty()) {
    std::fprintf(stderr, "nanochat: error: %s\n", bad.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nanochat::Error& e) {
    std::fprintf(stderr, "nanochat: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanochat: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
