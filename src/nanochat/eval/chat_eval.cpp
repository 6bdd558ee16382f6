// Chat evaluation (contract in chat_eval.h; nanochat scripts/chat_eval.py).
#include "nanochat/eval/chat_eval.h"

#include <algorithm>
#include <map>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tasks/registry.h"
#include "nanochat/tokenizer/conversation.h"

namespace nanochat {

namespace {

int64_t problems_to_run(const tasks::Task& task, int64_t max_problems) {
  const int64_t n = task.size();
  return max_problems < 0 ? n : std::min(n, max_problems);
}

// Sums this rank's counts over the ranks and fills accuracy.
void finish_counts(ChatEvalResult& r, Communicator& comm) {
  double counts[2] = {static_cast<double>(r.passed), static_cast<double>(r.total)};
  if (comm.world_size() > 1) comm.all_reduce_sum_f64(counts, 2)->wait();
  r.passed = static_cast<int64_t>(counts[0]);
  r.total = static_cast<int64_t>(counts[1]);
  r.accuracy = r.total > 0 ? static_cast<double>(r.passed) / static_cast<double>(r.total) : 0.0;
}

// The token of a one-token letter (cached: the same few letters recur).
int32_t letter_token(const Tokenizer& tok, std::map<std::string, int32_t>& cache, const tasks::Task& task,
                     int64_t problem, const std::string& letter) {
  auto it = cache.find(letter);
  if (it != cache.end()) return it->second;
  const std::vector<int32_t> ids = tok.encode(letter);
  if (ids.size() != 1)
    fail(task.name(), " problem ", problem, ": the answer letter '", letter, "' encodes to ", ids.size(),
         " tokens; categorical evaluation needs one token per letter");
  cache.emplace(letter, ids[0]);
  return ids[0];
}

// Index of the largest value, the first one on ties (torch.argmax on CPU).
size_t first_argmax(const std::vector<float>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace

ChatEvalResult run_categorical_eval(GPT& model, const Tokenizer& tok, const tasks::Task& task,
                                    const ChatEvalOptions& opt, Communicator& comm, const ChatEvalProgress& progress) {
  if (task.eval_type() != tasks::EvalType::Categorical)
    fail(task.name(), " is not a categorical task (it is judged on generated text): use the generative evaluation");
  if (opt.batch_size < 1) fail("the categorical batch size must be >= 1 (got ", opt.batch_size, ")");
  ChatEvalResult r;
  r.task = task.name();
  const int64_t n = problems_to_run(task, opt.max_problems);
  const int64_t B = opt.batch_size, num_batches = (n + B - 1) / B;
  const int64_t V = model.config().vocab_size;
  const int32_t pad = tok.bos_id();  // padding after a prompt never reaches its last position
  std::map<std::string, int32_t> letter_ids;
  std::vector<float> logits;
  for (int64_t i = comm.rank(); i < num_batches; i += comm.world_size()) {
    const int64_t i0 = i * B, i1 = std::min((i + 1) * B, n);
    const int rows = static_cast<int>(i1 - i0);
    std::vector<tasks::Example> examples;
    std::vector<std::vector<int32_t>> prompts;
    size_t longest = 0;
    for (int64_t p = i0; p < i1; ++p) {
      examples.push_back(task.get(p));
      prompts.push_back(render_for_completion(tok, examples.back().conversation));
      longest = std::max(longest, prompts.back().size());
    }
    std::vector<int32_t> ids(static_cast<size_t>(rows) * longest, pad), positions(static_cast<size_t>(rows));
    for (int b = 0; b < rows; ++b) {
      std::copy(prompts[b].begin(), prompts[b].end(), ids.begin() + static_cast<ptrdiff_t>(b * longest));
      positions[b] = static_cast<int32_t>(prompts[b].size()) - 1;
    }
    logits.resize(static_cast<size_t>(rows) * V);
    model.forward_logits_at(ids.data(), rows, static_cast<int>(longest), positions.data(), logits.data());
    for (int b = 0; b < rows; ++b) {
      const tasks::Example& ex = examples[b];
      const int64_t problem = i0 + b;
      if (ex.letters.empty()) fail(task.name(), " problem ", problem, " has no answer letters");
      std::vector<float> focus;
      for (const std::string& l : ex.letters)
        focus.push_back(logits[static_cast<size_t>(b) * V + letter_token(tok, letter_ids, task, problem, l)]);
      ProblemOutcome o;
      o.index = problem;
      o.choice = ex.letters[first_argmax(focus)];
      o.passed = task.evaluate(ex, o.choice);
      o.samples_passed = o.passed ? 1 : 0;
      r.passed += o.passed ? 1 : 0;
      r.total += 1;
      r.outcomes.push_back(std::move(o));
      if (progress) progress(r.passed, r.total);
    }
  }
  finish_counts(r, comm);
  return r;
}

ChatEvalResult run_generative_eval(Engine& engine, const tasks::Task& task, const ChatEvalOptions& opt,
                                   Communicator& comm, const ChatEvalProgress& progress) {
  if (task.eval_type() != tasks::EvalType::Generative)
    fail(task.name(), " is a categorical task (judged on the answer letter's logits): use the categorical evaluation");
  if (opt.num_samples < 1) fail("the number of samples per problem must be >= 1 (got ", opt.num_samples, ")");
  if (opt.max_new_tokens < 1) fail("the number of new tokens must be >= 1 (got ", opt.max_new_tokens, ")");
  const Tokenizer& tok = engine.tokenizer();
  ChatEvalResult r;
  r.task = task.name();
  const int64_t n = problems_to_run(task, opt.max_problems);
  GenerateOptions g;
  g.num_samples = opt.num_samples;
  g.max_tokens = opt.max_new_tokens;
  g.temperature = opt.temperature;
  g.top_k = opt.top_k;
  g.seed = opt.seed;
  g.tools = true;
  for (int64_t p = comm.rank(); p < n; p += comm.world_size()) {
    const tasks::Example ex = task.get(p);
    const std::vector<int32_t> prompt = render_for_completion(tok, ex.conversation);
    GenerateResult gen;
    try {
      gen = engine.generate(prompt, g);
    } catch (const Error& e) {
      fail(task.name(), " problem ", p, ": ", e.what());
    }
    ProblemOutcome o;
    o.index = p;
    for (const GeneratedRow& row : gen.rows)
      if (task.evaluate(ex, tok.decode(row.tokens))) ++o.samples_passed;
    o.passed = o.samples_passed > 0;
    r.passed += o.passed ? 1 : 0;
    r.total += 1;
    r.outcomes.push_back(std::move(o));
    if (progress) progress(r.passed, r.total);
  }
  finish_counts(r, comm);
  return r;
}

ChatEvalResult run_chat_eval(Engine& engine, const tasks::Task& task, const ChatEvalOptions& opt, Communicator& comm,
                             const ChatEvalProgress& progress) {
  if (task.eval_type() == tasks::EvalType::Categorical)
    return run_categorical_eval(engine.model(), engine.tokenizer(), task, opt, comm, progress);
  return run_generative_eval(engine, task, opt, comm, progress);
}

const std::vector<std::string>& chatcore_task_names() {
  static const std::vector<std::string> names = {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval"};
  return names;
}

bool chatcore_is_categorical(const std::string& task_name) {
  return task_name == "ARC-Easy" || task_name == "ARC-Challenge" || task_name == "MMLU";
}

double chat_eval_baseline(const std::string& task_name) { return chatcore_is_categorical(task_name) ? 0.25 : 0.0; }

namespace {
double centered(const std::string& name, double acc) {
  const double b = chat_eval_baseline(name);
  return (acc - b) / (1.0 - b);
}
}  // namespace

std::optional<double> chatcore_metric(const std::vector<std::pair<std::string, double>>& results) {
  for (const std::string& name : chatcore_task_names()) {
    const bool present = std::any_of(results.begin(), results.end(), [&](const auto& r) { return r.first == name; });
    if (!present) return std::nullopt;
  }
  double sum = 0;
  for (const auto& [name, acc] : results) sum += centered(name, acc);
  return sum / static_cast<double>(results.size());
}

tasks::TaskPtr open_chat_eval_task(const std::string& name) { return tasks::open_task(name, "", "test"); }

ChatCoreResult chat_core(Engine& engine, const ChatEvalTaskOpener& open, const ChatCoreLimits& limits,
                         Communicator& comm, const std::function<void(const ChatEvalResult&)>& on_task) {
  ChatCoreResult out;
  double all = 0, cat = 0;
  int n_cat = 0;
  for (const std::string& name : chatcore_task_names()) {
    const tasks::TaskPtr task = open(name);
    ChatEvalOptions o;
    o.batch_size = limits.batch_size;
    const bool categorical = chatcore_is_categorical(name);
    o.max_problems = categorical ? limits.max_categorical : limits.max_generative;
    const ChatEvalResult r = run_chat_eval(engine, *task, o, comm);
    if (on_task) on_task(r);
    out.accuracies.emplace_back(name, r.accuracy);
    all += centered(name, r.accuracy);
    if (categorical) {
      cat += centered(name, r.accuracy);
      ++n_cat;
    }
  }
  out.chatcore = all / static_cast<double>(chatcore_task_names().size());
  out.chatcore_cat = cat / n_cat;
  return out;
}

std::vector<double> pass_at_k(Engine& engine, const tasks::Task& task, int num_samples, int64_t max_examples,
                              int max_new_tokens, double temperature, int top_k, Communicator& comm) {
  if (num_samples < 1) fail("pass@k needs at least one sample per problem (got ", num_samples, ")");
  const Tokenizer& tok = engine.tokenizer();
  const int64_t n = max_examples < 0 ? task.size() : std::min(max_examples, task.size());
  std::vector<double> counts(static_cast<size_t>(num_samples) + 1, 0.0);  // pass@1..k, then records
  GenerateOptions g;
  g.num_samples = num_samples;
  g.max_tokens = max_new_tokens;
  g.temperature = temperature;
  g.top_k = top_k;
  g.seed = 42;
  for (int64_t i = comm.rank(); i < n; i += comm.world_size()) {
    const tasks::Example ex = task.get(i);
    const GenerateResult gen = engine.generate(render_for_completion(tok, ex.conversation), g);
    bool any = false;
    for (int k = 0; k < num_samples; ++k) {
      any = any || task.evaluate(ex, tok.decode(gen.rows[static_cast<size_t>(k)].tokens));
      counts[static_cast<size_t>(k)] += any ? 1.0 : 0.0;
    }
    counts.back() += 1.0;
  }
  if (comm.world_size() > 1) comm.all_reduce_sum_f64(counts.data(), counts.size())->wait();
  const double records = counts.back();
  counts.pop_back();
  for (double& c : counts) c = records > 0 ? c / records : 0.0;
  return counts;
}

}  // namespace nanochat
