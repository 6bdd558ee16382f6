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
/// base_checkpoints/<model_tag>/model_<step>; empty tag = default_model_tag (the largest d<N>,
/// else the newest tag), step -1 = the last complete one (resolved by load_trained_model).
struct CheckpointChoice {
  std::string model_tag;
  int64_t step = -1;
};

/// Adds -g/--model-tag and -s/--step to `c`; `choice` must outlive the app (hold it in the
/// command's shared argument struct).
inline void add_checkpoint_options(CLI::App* c, CheckpointChoice& choice) {
  c->add_option("-g,--model-tag", choice.model_tag,
                "checkpoint tag under base_checkpoints/ (default: the d<N> tag with the largest N, "
                "else the most recently written tag)");
  c->add_option("-s,--step", choice.step, "checkpoint step (default or -1: the last complete one)");
}

/// Adds --threads (OpenMP threads for the model's kernels; 0 = the OpenMP default).
inline void add_threads_option(CLI::App* c, int& threads) {
  c->add_option("--threads", threads, "OpenMP threads (0 = default)")->capture_default_str();
}

}  // namespace nanochat::cli
