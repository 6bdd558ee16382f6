#pragma once
// nanochat's command lines as its users type them (runs/speedrun.sh, runs/runcpu.sh):
//   python -m scripts.base_train --depth=4              ->  nanochat -m scripts.base_train --depth=4
//   torchrun --nproc_per_node=2 -m scripts.base_train -- --depth=4
//                                                       ->  nanochat run --nproc_per_node=2 -m scripts.base_train --
//                                                       --depth=4
// are rewritten, before parsing, to this program's subcommands (nanochat base-train --depth=4,
// nanochat run --nproc_per_node=2 base-train --depth=4). CLI11 reads --flag=value itself.
#include <functional>
#include <string>
#include <vector>

namespace nanochat::cli {

/// The subcommand words of a nanochat module (scripts.base_train -> {"base-train"},
/// nanochat.dataset -> {"data", "download"}); empty for a module nanochat has no script for.
std::vector<std::string> subcommand_of_module(const std::string& module);

/// `args` (argv without the program name) with a `-m <module>` (first word, or first word after
/// `run`'s own flags) replaced by the module's subcommand words and one `--` right after the module
/// dropped; other command lines are returned unchanged. `registered(word)` says whether a
/// top-level subcommand exists. Throws nanochat::Error naming the module for `-m` without a module,
/// a module nanochat does not have, or a script this program does not implement yet.
std::vector<std::string> rewrite_module_command(const std::vector<std::string>& args,
                                                const std::function<bool(const std::string&)>& registered);

}  // namespace nanochat::cli
