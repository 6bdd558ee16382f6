#pragma once
// The road as data: the stages `nanochat speedrun` runs, in order, each as nanochat commands
// (cli/speedrun.cpp runs them as child processes of the same binary). A preset fixes every
// stage's flags; nanochat's runs/runcpu.sh is the `runcpu` preset stage for stage (its tokenizer,
// base-train, base-eval and chat-sft flags), plus the chat evaluations its card needs; `tiny`
// walks the whole road, RL included, in a few minutes on 2 cores. A flag given as
// --<command>.<flag> VALUE replaces that flag in every stage running <command> (or is added).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nanochat::road {

/// One stage: what it runs, whether it trains (resumable from its own checkpoints), and what it
/// leaves behind (the files whose checksums mark it done, road/ledger.h).
struct Stage {
  std::string id;     ///< unique in the road: "data", "tok-train", ..., "chat-eval-sft", "chat-eval-rl"
  std::string title;  ///< for people: "Base model training"
  /// The commands, each a nanochat command line without the program ("base-train", "--depth", "6", ...).
  std::vector<std::vector<std::string>> commands;
  /// The checkpoint folder (relative to the base folder) a training stage resumes from; "" = none.
  std::string checkpoint_dir;
  /// What marks it done, relative to the base folder (a folder: its files; a checkpoint folder:
  /// the files of its last complete step) or absolute.
  std::vector<std::string> outputs;
  std::string section;       ///< the report card section it writes (core/report_log.h), "" = none
  bool distributed = false;  ///< every rank of a job takes part (base-train, chat-sft, chat-rl)
};

/// A flag given for a command: --<command>.<flag> VALUE (value empty for a flag without one).
struct FlagOverride {
  std::string command;             ///< "base-train"
  std::vector<std::string> names;  ///< every spelling of the flag ("--max-problems", "-x")
  std::string value;
  bool takes_value = true;
};

struct RoadOptions {
  std::string preset = "tiny";       ///< tiny | runcpu
  bool offline = false;              ///< demo corpus, no CORE bundle download, the offline chat tasks
  std::optional<bool> rl;            ///< chat-rl and its evaluation (default: the preset's)
  std::string model_tag;             ///< "" = d<depth>
  std::string base_dir;              ///< $NANOCHAT_BASE_DIR (the offline chat tasks' files go to <base_dir>/speedrun/)
  std::string data_dir;              ///< the shards' folder (offline: must exist or be made by the demo corpus script)
  std::string demo_corpus_script;    ///< scripts/demo_corpus.sh next to the binary, "" when not found
  bool eval_bundle_present = false;  ///< $NANOCHAT_BASE_DIR/eval_bundle/core.yaml exists (CORE runs offline too)
  std::vector<FlagOverride> overrides;
};

/// The presets' names, for --help and errors.
std::vector<std::string> preset_names();

/// The stages of `o`, overrides applied. Throws nanochat::Error naming an unknown preset.
std::vector<Stage> plan_road(const RoadOptions& o);

/// The value of `flag` in `command` (the last occurrence), or "" when absent.
std::string flag_value(const std::vector<std::string>& command, const std::string& flag);

/// The model tag of the road: o.model_tag, else "d" + the base-train stage's --depth.
std::string road_model_tag(const std::vector<Stage>& stages, const RoadOptions& o);

/// Replaces every occurrence of `ov`'s flag (any spelling) in `command` by --name VALUE, or
/// appends it. Returns true when `command` runs ov.command.
bool apply_override(std::vector<std::string>& command, const FlagOverride& ov);

}  // namespace nanochat::road
