// `nanochat chat-eval`: nanochat scripts/chat_eval.py. Loads a chat checkpoint (-i sft|rl|base,
// -g, -s), evaluates each task of -a ("ARC-Easy|GSM8K", default the five of ChatCORE) on its test
// split with eval/chat_eval.h, prints "<task> accuracy: xx.xx%" per task and, when the five were
// evaluated, "ChatCORE metric: x.xxxx". Under `nanochat run` (or torchrun's variables) the ranks
// share the problems and rank 0 prints the sums. While a task runs, a terminal shows each rank's
// running count on one line, as nanochat does.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/engine/engine.h"
#include "nanochat/eval/chat_eval.h"
#include "nanochat/model/gpt.h"

namespace nanochat::cli {

namespace {
struct ChatEvalArgs {
  CheckpointChoice ckpt;
  std::string task_names;  // "" = the five of ChatCORE
  ChatEvalOptions opt;
  int threads = 0;
  std::string device_type;
};

// "A|B|C" -> {"A", "B", "C"} (nanochat splits on '|'; empty names are refused).
std::vector<std::string> split_task_names(const std::string& text) {
  if (text.empty()) return chatcore_task_names();
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t bar = text.find('|', at);
    std::string name = text.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    if (name.empty()) fail("-a/--task-name '", text, "' has an empty task name; separate names with '|'");
    out.push_back(std::move(name));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  return out;
}

void run(const ChatEvalArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  if (!a.device_type.empty() && a.device_type != "cpu")
    fail("--device-type ", a.device_type, ": this program runs on the CPU only (use cpu or leave it out)");
  const std::vector<std::string> names = split_task_names(a.task_names);
  std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
  const bool main_rank = comm->rank() == 0;
  InferenceModel im = load_for_inference(parse_checkpoint_source(a.ckpt.source), a.ckpt.model_tag, a.ckpt.step);
  Engine engine(*im.lm.model, im.tokenizer);
  if (main_rank)
    std::printf("chat-eval: %s model %s step %lld, %d rank(s)\n", checkpoint_source_name(im.source), im.lm.tag.c_str(),
                static_cast<long long>(im.lm.step), comm->world_size());
  const bool tty = isatty(fileno(stdout)) != 0;
  const int rank = comm->rank();
  std::vector<std::pair<std::string, double>> results;
  for (const std::string& name : names) {
    const tasks::TaskPtr task = open_chat_eval_task(name);
    Timer timer;
    auto progress = [&](int64_t passed, int64_t total) {
      std::printf("\r\033[KRank %d | %lld/%lld (%.2f%%)", rank, static_cast<long long>(passed),
                  static_cast<long long>(total), 100.0 * static_cast<double>(passed) / static_cast<double>(total));
      std::fflush(stdout);
    };
    const ChatEvalResult r =
        run_chat_eval(engine, *task, a.opt, *comm, tty ? ChatEvalProgress(progress) : ChatEvalProgress());
    if (tty) std::printf("\n");
    if (main_rank) {
      std::printf("%s: %lld/%lld (%.2f%%) in %.1f s\n", name.c_str(), static_cast<long long>(r.passed),
                  static_cast<long long>(r.total), 100.0 * r.accuracy, timer.seconds());
      std::printf("%s accuracy: %.2f%%\n", name.c_str(), 100.0 * r.accuracy);
      std::fflush(stdout);
    }
    bool seen = false;
    for (auto& [n, acc] : results)
      if (n == name) acc = r.accuracy, seen = true;  // a task named twice counts once, as in nanochat's dict
    if (!seen) results.emplace_back(name, r.accuracy);
  }
  const auto cc = chatcore_metric(results);
  if (cc && main_rank) std::printf("ChatCORE metric: %.4f\n", *cc);
  if (!main_rank) return;
  nlohmann::ordered_json card;
  card["model"] = im.lm.tag + " step " + std::to_string(im.lm.step);
  card["max problems per task"] = a.opt.max_problems;
  for (const auto& [name, acc] : results) card[name] = acc;
  if (cc) card["ChatCORE"] = *cc;
  const std::string source = checkpoint_source_name(im.source);
  log_report_section("chat-evaluation-" + source, "Chat evaluation " + source, card);
}
}  // namespace

void register_chat_eval(CLI::App& app) {
  auto a = std::make_shared<ChatEvalArgs>();
  CLI::App* c = app.add_subcommand("chat-eval",
                                   "evaluate a chat checkpoint on ARC, MMLU, GSM8K, HumanEval and "
                                   "the synthetic tasks; ChatCORE (nanochat chat_eval)");
  add_checkpoint_options(c, a->ckpt);
  add_source_option(c, a->ckpt, "sft");
  c->add_option("-a,--task-name", a->task_names,
                "tasks separated by '|' (default: ARC-Easy|ARC-Challenge|MMLU|GSM8K|HumanEval); also SpellingBee, "
                "Arithmetic, Identity");
  c->add_option("-t,--temperature", a->opt.temperature, "sampling temperature of generative tasks (0 = greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("-m,--max-new-tokens", a->opt.max_new_tokens, "tokens per generated answer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("-n,--num-samples", a->opt.num_samples, "answers per generative problem (pass@n)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("-k,--top-k", a->opt.top_k, "top-k sampling (0 = all tokens)")->capture_default_str();
  c->add_option("-b,--batch-size", a->opt.batch_size, "problems per forward in categorical tasks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("-x,--max-problems", a->opt.max_problems, "evaluate at most this many problems per task (-1 = all)")
      ->capture_default_str();
  c->add_option("--seed", a->opt.seed, "sampling seed of each generative problem")->capture_default_str();
  c->add_option("--device-type", a->device_type, "cuda|cpu|mps; only cpu runs here");
  add_threads_option(c, a->threads);
  c->callback([a] { run(*a); });
}

}  // namespace nanochat::cli
