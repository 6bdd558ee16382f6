#pragma once
// The sample and CORE parts of `nanochat base-eval --eval core,bpb,sample` (nanochat
// scripts/base_eval.py main; docs/nanochat.md 3.6).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace nanochat {
class Tokenizer;
struct LoadedModel;
}  // namespace nanochat

namespace nanochat::cli {

/// The modes of --eval: a comma-separated subset of core, bpb, sample. Throws nanochat::Error
/// naming an unknown mode.
struct EvalModes {
  bool core = false, bpb = false, sample = false;
};
EvalModes parse_eval_modes(const std::string& text);

/// nanochat's samples: the 7 fixed prompts greedily continued by 16 tokens, then 8 samples of up
/// to 128 tokens after <|bos|> alone at temperature 1 (seeds 42..49); each printed after a line of dashes.
/// The conditioned samples' texts are added to `card` ("samples", the report card's section).
void print_base_samples(LoadedModel& lm, const Tokenizer& tok, nlohmann::ordered_json& card);

/// CORE on $NANOCHAT_BASE_DIR/eval_bundle (eval/core_eval.h): a line per task, the CSV
/// <base>/base_eval/base_model_<step:06d>.csv and "CORE metric: x.xxxx". When the bundle is missing
/// and `required` is false, prints a note naming the path and the download command and returns;
/// otherwise a missing bundle throws nanochat::Error with the same facts.
/// The metric and each task's centered score are added to `card`.
void run_core_eval(LoadedModel& lm, const Tokenizer& tok, int64_t max_per_task, bool required,
                   nlohmann::ordered_json& card);

}  // namespace nanochat::cli
