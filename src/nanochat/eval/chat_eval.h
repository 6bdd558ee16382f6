#pragma once
// Chat evaluation: how well a chat model answers a task's problems (nanochat scripts/chat_eval.py
// run_categorical_eval, run_generative_eval, run_chat_eval and its ChatCORE metric; the ChatCORE
// of chat_sft.py; commit 92d63d4).
//
// Categorical (tasks::EvalType::Categorical: ARC, MMLU): problems go batch_size at a time. Each is
// primed for the answer (render_for_completion), the batch is padded at the end with <|bos|> to its
// longest prompt, and the logits at each prompt's last position are read (the padding after it
// cannot change them: the attention is causal). Among the tokens of the example's letters (each
// letter must encode to one token) the largest logit wins (the first on ties, like torch's
// argmax), and Task::evaluate judges that letter.
// Generative (GSM8K, HumanEval): one problem at a time, the engine (engine/engine.h, calculator tool
// on) samples num_samples answers of at most max_new_tokens tokens from the primed prompt; each
// answer's decoded text (tool output included, the final <|assistant_end|> not) is judged by
// Task::evaluate, and the problem passes when any answer does (pass@num_samples).
//
// Problems 0 .. min(size, max_problems)-1 are evaluated. Over W ranks (comm) the work is strided
// as nanochat strides it: categorical batches i = rank, rank + W, ...; generative problems
// p = rank, rank + W, ...; the passed and total counts are summed over the ranks (every rank must
// call together, with the same task and options). With temperature 0 the outcome equals nanochat's
// on the same weights (tests/train/chat_eval_test.cpp against tools/chat/make_chat_eval_fixture.py);
// sampled answers draw from this engine's generator, not torch's.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/tasks/task.h"

namespace nanochat {

class Communicator;
class Engine;
class GPT;
class Tokenizer;

/// The settings of one evaluation (nanochat chat_eval's flags and defaults).
struct ChatEvalOptions {
  int batch_size = 8;         ///< -b: categorical problems per forward (>= 1)
  int num_samples = 1;        ///< -n: generative answers per problem (>= 1)
  int max_new_tokens = 512;   ///< -m: tokens per generative answer (>= 1)
  double temperature = 0.0;   ///< -t: 0 = greedy
  int top_k = 50;             ///< -k: 0 = all tokens
  int64_t max_problems = -1;  ///< -x: evaluate at most this many problems (< 0: all)
  uint64_t seed = 42;         ///< sampling seed of every problem (nanochat's generate_batch default)
};

/// What happened to one problem on this rank.
struct ProblemOutcome {
  int64_t index = 0;       ///< the problem's index in the task
  bool passed = false;     ///< categorical: the letter was right; generative: any answer was
  std::string choice;      ///< categorical: the chosen letter; generative: empty
  int samples_passed = 0;  ///< generative: how many of the answers passed; categorical: 0 or 1
};

/// The result of evaluating one task.
struct ChatEvalResult {
  std::string task;                      ///< Task::name()
  int64_t passed = 0, total = 0;         ///< summed over the ranks
  double accuracy = 0;                   ///< passed / total (0 when there was nothing to evaluate)
  std::vector<ProblemOutcome> outcomes;  ///< this rank's problems, in the order evaluated
};

/// Called after every problem this rank finishes with its running (passed, total) counts, for a
/// progress line. An exception thrown here propagates.
using ChatEvalProgress = std::function<void(int64_t passed, int64_t total)>;

/// The categorical evaluation above with `model`'s logits. Throws nanochat::Error when the task is
/// not categorical, an example has no letters, a letter does not encode to exactly one token
/// (naming the task, the problem and the letter), batch_size < 1, or from the task and the model.
ChatEvalResult run_categorical_eval(GPT& model, const Tokenizer& tok, const tasks::Task& task,
                                    const ChatEvalOptions& opt, Communicator& comm,
                                    const ChatEvalProgress& progress = {});

/// The generative evaluation above with `engine`. Throws nanochat::Error when the task is not
/// generative, num_samples < 1, max_new_tokens < 1, or from the task and the engine (a prompt as
/// long as the model's context, named with the problem).
ChatEvalResult run_generative_eval(Engine& engine, const tasks::Task& task, const ChatEvalOptions& opt,
                                   Communicator& comm, const ChatEvalProgress& progress = {});

/// run_categorical_eval or run_generative_eval by the task's eval_type (nanochat run_chat_eval);
/// the categorical one uses engine.model() and engine.tokenizer().
ChatEvalResult run_chat_eval(Engine& engine, const tasks::Task& task, const ChatEvalOptions& opt, Communicator& comm,
                             const ChatEvalProgress& progress = {});

/// The five tasks of ChatCORE, in nanochat's order: ARC-Easy, ARC-Challenge, MMLU, GSM8K, HumanEval.
const std::vector<std::string>& chatcore_task_names();
/// Whether nanochat's ChatCORE treats the task as categorical (ARC-Easy, ARC-Challenge, MMLU).
bool chatcore_is_categorical(const std::string& task_name);
/// The accuracy of guessing (nanochat's baseline_accuracies): 0.25 for ARC-Easy, ARC-Challenge and
/// MMLU (one of four), 0 for every other task.
double chat_eval_baseline(const std::string& task_name);

/// nanochat chat_eval's ChatCORE: when every task of chatcore_task_names() is among `results`
/// (name, accuracy), the mean over ALL the results of (accuracy - baseline) / (1 - baseline);
/// otherwise nullopt. 0 = guessing, 1 = every problem right.
std::optional<double> chatcore_metric(const std::vector<std::pair<std::string, double>>& results);

/// The problem limits of a ChatCORE estimate during training (nanochat chat_sft's
/// --chatcore-max-cat, --chatcore-max-sample; -1 = all problems).
struct ChatCoreLimits {
  int64_t max_categorical = -1;
  int64_t max_generative = 24;
  int batch_size = 8;  ///< categorical batch (chat_sft passes its --device-batch-size)
};

/// The result of chat_core(): per task (chatcore_task_names() order) its accuracy, the ChatCORE
/// over the five and the one over the three categorical tasks (nanochat's chatcore_cat).
struct ChatCoreResult {
  std::vector<std::pair<std::string, double>> accuracies;
  double chatcore = 0, chatcore_cat = 0;
};

/// Opens a task by its chat_eval name (e.g. "ARC-Easy" -> ARC-Easy's test split; normally
/// open_chat_eval_task); throws nanochat::Error naming what is missing.
using ChatEvalTaskOpener = std::function<tasks::TaskPtr(const std::string& name)>;

/// The task chat_eval evaluates under `name`: tasks::open_task(name, default subset, "test")
/// (ARC-Easy/ARC-Challenge, MMLU "all", GSM8K "main", HumanEval; the synthetic tasks' test split).
/// Throws nanochat::Error as open_task does (an unknown name lists the known ones; a missing
/// dataset names the download command).
tasks::TaskPtr open_chat_eval_task(const std::string& name);

/// The ChatCORE estimate nanochat's chat_sft makes every --chatcore-every steps: the five tasks,
/// each with run_chat_eval at the default options (greedy, 512 new tokens, top-k 50, one sample)
/// and max_problems from `limits` (categorical or generative), opened by `open`. Every rank must
/// call together. on_task (optional) is called after each task with its result (for a log line).
/// Errors as open and run_chat_eval throw.
ChatCoreResult chat_core(Engine& engine, const ChatEvalTaskOpener& open, const ChatCoreLimits& limits,
                         Communicator& comm, const std::function<void(const ChatEvalResult&)>& on_task = {});

/// chat-rl's evaluation (nanochat scripts/chat_rl.py run_gsm8k_eval): pass@k on the first
/// max_examples problems of `task` (all when < 0), k = 1..num_samples: the fraction of problems
/// (over every rank) where any of the first k answers passes Task::evaluate. Problems are strided over the ranks; every
/// rank must call together.
std::vector<double> pass_at_k(Engine& engine, const tasks::Task& task, int num_samples, int64_t max_examples,
                              int max_new_tokens, double temperature, int top_k, Communicator& comm);

}  // namespace nanochat
