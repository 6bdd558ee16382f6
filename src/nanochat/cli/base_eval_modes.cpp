#include "nanochat/cli/base_eval_modes.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/engine/engine.h"
#include "nanochat/engine/sample_prompts.h"
#include "nanochat/eval/core_eval.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat::cli {

EvalModes parse_eval_modes(const std::string& text) {
  EvalModes m;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    std::string w = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    while (!w.empty() && w.front() == ' ') w.erase(w.begin());
    while (!w.empty() && w.back() == ' ') w.pop_back();
    if (w == "core")
      m.core = true;
    else if (w == "bpb")
      m.bpb = true;
    else if (w == "sample")
      m.sample = true;
    else
      fail("--eval: '", w, "' is not an evaluation; use a comma-separated subset of core, bpb, sample");
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return m;
}

void print_base_samples(LoadedModel& lm, const Tokenizer& tok, nlohmann::ordered_json& card) {
  const std::string rule(80, '-');
  auto show = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    std::printf("%s\n%s\n", rule.c_str(), tok.decode(all).c_str());
    std::fflush(stdout);
  };
  // nanochat's base_eval: Engine.generate_batch, greedy rows of 16 tokens for the prompts, then
  // 8 rows of 128 tokens at temperature 1 from BOS alone (one prefill)
  Engine engine(*lm.model, tok);
  std::printf("\nConditioned samples:\n");
  for (const char* p : kBaseSamplePrompts) {
    std::vector<int32_t> prompt{tok.bos_id()};
    for (int32_t id : tok.encode(p)) prompt.push_back(id);
    GenerateOptions o;
    o.max_tokens = 16;
    o.temperature = 0.0;
    const std::vector<int32_t> out = engine.generate(prompt, o).rows[0].tokens;
    show(prompt, out);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    card["samples"].push_back(tok.decode(all));
  }
  std::printf("\nUnconditioned samples:\n");
  const std::vector<int32_t> bos{tok.bos_id()};
  GenerateOptions o;
  o.num_samples = 8;
  o.max_tokens = 128;
  o.temperature = 1.0;
  for (const auto& row : engine.generate(bos, o).rows) show(bos, row.tokens);
}

void run_core_eval(LoadedModel& lm, const Tokenizer& tok, int64_t max_per_task, bool required,
                   nlohmann::ordered_json& card) {
  const std::string dir = base_dir() + "/eval_bundle";
  if (!required && !std::filesystem::exists(dir + "/core.yaml")) {
    std::printf("CORE: skipped, %s/core.yaml is missing; %s, or pass --eval bpb,sample\n", dir.c_str(),
                kEvalBundleDownloadHint);
    return;
  }
  const CoreBundle bundle = read_core_bundle(dir);
  char name[64];
  std::snprintf(name, sizeof name, "base_model_%06lld", static_cast<long long>(lm.step));
  const std::string csv = base_dir() + "/base_eval/" + name + ".csv";
  CoreResult done;  // the tasks finished so far: written when a later one stops the run
  CoreResult r;
  try {
    r = evaluate_core(*lm.model, tok, bundle, max_per_task, [&done](const CoreTaskResult& t) {
      std::printf("Evaluating: %s (%d-shot, type: %s)... accuracy: %.4f | centered: %.4f | time: %.2fs\n",
                  t.label.c_str(), t.num_fewshot, core_task_type_name(t.type), t.accuracy, t.centered, t.seconds);
      std::fflush(stdout);
      done.tasks.push_back(t);
    });
  } catch (const Error& e) {
    if (done.tasks.empty()) throw;
    const std::string partial = base_dir() + "/base_eval/" + name + "_partial.csv";
    write_core_csv(partial, done, /*complete=*/false);
    fail(e.what(), " (task ", done.tasks.size() + 1, " of ", bundle.tasks.size(), ", ",
         bundle.tasks[done.tasks.size()].label, "; the ", done.tasks.size(),
         done.tasks.size() == 1 ? " task before it is in " : " tasks before it are in ", partial,
         ", without a CORE metric)");
  }
  write_core_csv(csv, r);
  std::printf("\nResults written to: %s\nCORE metric: %.4f\n", csv.c_str(), r.core_metric);
  card["CORE"] = r.core_metric;
  card["CORE max per task"] = max_per_task;
  for (const CoreTaskResult& t : r.tasks) card["CORE tasks (centered)"][t.label] = t.centered;
  std::fflush(stdout);
}

}  // namespace nanochat::cli
