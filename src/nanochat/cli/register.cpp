#include "nanochat/cli/commands.h"

namespace nanochat::cli {

// Subcommand registrations (one per cli/<name>.cpp). Keep this list in DESIGN.md order.
void register_all(CLI::App& app) {
  (void)app;
}

}  // namespace nanochat::cli
