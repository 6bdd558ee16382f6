#pragma once
// Each subcommand lives in its own file and registers itself on the CLI11 app here.
// A registered callback throws nanochat::Error for user errors; main prints it and exits 1.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace nanochat::cli {

// Add one line per subcommand (definition in cli/<name>.cpp).
void register_all(CLI::App& app);

/// The trained checkpoint a command loads (nanochat's -g/--model-tag and -s/--step):
/// <source folder>/<model_tag>/model_<step> (base_checkpoints/ unless -i says otherwise); empty tag = default_model_tag
/// (the largest d<N>, else the newest tag), step -1 = the last complete one (resolved by load_trained_model).
struct CheckpointChoice {
  std::string model_tag;
  int64_t step = -1;
  std::string source = "base";  ///< -i/--source where the command offers it: base, sft or rl
};

/// Adds -g/--model-tag and -s/--step to `c`; `choice` must outlive the app (hold it in the
/// command's shared argument struct).
inline void add_checkpoint_options(CLI::App* c, CheckpointChoice& choice) {
  c->add_option("-g,--model-tag", choice.model_tag,
                "checkpoint tag under the checkpoint folder (default: the d<N> tag with the largest N, "
                "else the most recently written tag)");
  c->add_option("-s,--step", choice.step, "checkpoint step (default or -1: the last complete one)");
}

/// Adds -i/--source (nanochat's: which stage's checkpoints, base|sft|rl; checkpoint/model_io.h
/// CheckpointSource) with `default_source` as its default.
inline void add_source_option(CLI::App* c, CheckpointChoice& choice, const std::string& default_source) {
  choice.source = default_source;
  c->add_option("-i,--source", choice.source,
                "checkpoints to load: base (base_checkpoints/), sft (chatsft_checkpoints/) or rl "
                "(chatrl_checkpoints/)")
      ->check(CLI::IsMember({"base", "sft", "rl"}))
      ->capture_default_str();
}

/// Adds --threads (OpenMP threads for the model's kernels; 0 = the OpenMP default).
inline void add_threads_option(CLI::App* c, int& threads) {
  c->add_option("--threads", threads, "OpenMP threads (0 = default)")->capture_default_str();
}

}  // namespace nanochat::cli
