#pragma once
// Each subcommand lives in its own file and registers itself on the CLI11 app here.
// A registered callback throws nanochat::Error for user errors; main prints it and exits 1.
#include <CLI/CLI.hpp>

namespace nanochat::cli {

// Add one line per subcommand (definition in cli/<name>.cpp).
void register_all(CLI::App& app);

}  // namespace nanochat::cli
