#pragma once
// nanochat's CORE metric (the DCLM paper's in-context-learning score; nanochat core_eval.py and
// scripts/base_eval.py evaluate_core; docs/nanochat.md 3.6): per task of the eval bundle
// (eval/core_bundle.h), the examples shuffled by Python's random.Random(1337) and cut to
// max_per_task; per example i, num_fewshot other examples drawn by random.Random(1234 + i).sample
// (core/py_random.h); the prompts rendered as nanochat's jinja templates render them
// (render_core_prompts); each prompt tokenized with <|bos|> prepended and run through the model:
//   multiple_choice / schema: the option whose answer tokens have the lowest mean cross-entropy
//     (the first on ties) must be gold; the answer is the tokens after the prompts' common prefix
//     (multiple_choice) or the common suffix (schema);
//   language_modeling: the argmax at every position of the continuation must be its next token.
// accuracy = correct / examples, rounded to float32 as nanochat's tensor mean is; centered = (accuracy - b/100) / (1 -
// b/100) with b the task's random baseline in percent; CORE = the mean of the centered accuracies over the tasks.
// Sequences are not cropped (nanochat's GPT has no max_seq_len); one longer than the model's
// rotary table (10 x sequence_len) is an error naming the task.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nanochat/eval/core_bundle.h"

namespace nanochat {

class Communicator;

class GPT;
class Tokenizer;

/// The prompts of one example (nanochat render_prompts_mc / _schema / _lm), with d = the
/// task's delimiter and fs the few-shot examples:
///   multiple_choice: for each choice c: sum(fs.query + d + fs.choices[fs.gold] + "\n\n") + query + d + c
///   schema: for each option o: sum(fs.context_options[fs.gold] + d + fs.continuation + "\n\n") + o + d + continuation
///   language_modeling: [strip(P), P + continuation] with
///     P = sum(strip(fs.context) + d + fs.continuation + "\n\n") + strip(context) + d
/// where strip removes leading and trailing whitespace as Python's str.strip() does (Unicode).
std::vector<std::string> render_core_prompts(const CoreTask& task, const CoreItem& item,
                                             const std::vector<const CoreItem*>& fewshot);

/// Python's str.strip() on UTF-8 text (Unicode whitespace; invalid bytes are kept).
std::string py_strip(const std::string& s);

/// The examples CORE evaluates for a task: `items` shuffled by random.Random(1337).shuffle, then
/// the first max_per_task of them (all when max_per_task <= 0).
std::vector<CoreItem> core_task_examples(std::vector<CoreItem> items, int64_t max_per_task);

/// The few-shot examples of example `idx` of `data` (k = task.num_fewshot):
/// random.Random(1234 + idx).sample of the other indices, as indices into data. Throws
/// nanochat::Error naming the task when it has fewer than k + 1 examples.
std::vector<size_t> core_fewshot_indices(const CoreTask& task, size_t n_examples, size_t idx);

/// Whether the model answers example `idx` of `data` right (nanochat evaluate_example).
bool evaluate_core_example(GPT& model, const Tokenizer& tok, const CoreTask& task, const std::vector<CoreItem>& data,
                           size_t idx);

struct CoreTaskResult {
  std::string label;
  CoreTaskType type = CoreTaskType::MultipleChoice;
  int num_fewshot = 0;
  std::vector<uint8_t> correct;  ///< per example of core_task_examples, in that order
  double accuracy = 0, centered = 0, seconds = 0;
};

struct CoreResult {
  std::vector<CoreTaskResult> tasks;  ///< core.yaml's order
  double core_metric = 0;
};

/// The ranks that share CORE's examples (nanochat core_eval under torchrun): this rank evaluates
/// examples rank, rank + world, ...; `sum` adds n doubles over the ranks in place (collective).
struct CoreRanks {
  int rank = 0, world = 1;
  std::function<void(double*, size_t)> sum = {};
};

/// Evaluates every task of the bundle (its examples shared by `ranks`; every rank gets the whole
/// result). on_task (if set) is called after each task (for progress lines). Throws
/// nanochat::Error from the bundle readers or the model.
CoreResult evaluate_core(GPT& model, const Tokenizer& tok, const CoreBundle& bundle, int64_t max_per_task,
                         const std::function<void(const CoreTaskResult&)>& on_task = {}, const CoreRanks& ranks = {});

/// Writes nanochat base_eval.py's CSV: "Task, Accuracy, Centered" padded to 35/10/10 columns, a
/// row per task (6 decimals), then "CORE" with the metric (left out when !complete: the tasks of a
/// run that stopped early). Throws nanochat::Error naming the path.
void write_core_csv(const std::string& path, const CoreResult& r, bool complete = true);

}  // namespace nanochat
