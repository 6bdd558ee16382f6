// `nanochat base-eval`: nanochat scripts/base_eval.py (docs/nanochat.md 3.6, 8.1 step 5): --eval
// sample (cli/base_eval_modes.h), bpb (bits per byte of a trained checkpoint on the train and val
// splits) and core (the CORE metric, eval/core_eval.h), in that order.
// While a split is evaluated, rank 0 (RANK unset or 0) prints a progress line at every tenth of
// its batches and at least every 30 s: "<split>: <done>/<total> batches (<pct>%) | <tokens> tokens
// | <elapsed> s | <tok/s> tok/s".
#include <cstdio>
#include <memory>
#include <string>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/base_eval_modes.h"
#include "nanochat/cli/commands.h"
#include "nanochat/cluster/env.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/threads.h"
#include "nanochat/core/timer.h"
#include "nanochat/data/loader.h"
#include "nanochat/eval/bpb.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"

namespace nanochat::cli {

namespace {
// Seconds between progress lines when a tenth of the batches takes longer than that.
constexpr double kProgressEverySeconds = 30.0;

struct EvalArgs {
  CheckpointChoice ckpt;
  int device_batch_size = 0;  // 0 = the checkpoint's
  int64_t split_tokens = 40 * 524288;
  int threads = 0;
  std::string eval = "core,bpb,sample";
  int64_t max_per_task = -1;
  std::string dtype = "float32";
};

// train and val bpb over --split-tokens per split (nanochat evaluate_bpb)
void evaluate_splits(LoadedModel& lm, const Tokenizer& tok, const EvalArgs& args, nlohmann::ordered_json& card) {
  const EvalArgs* a = &args;
  {
    data::LoaderOptions o;
    o.B = a->device_batch_size > 0 ? a->device_batch_size : static_cast<int>(lm.run.device_batch_size.value_or(8));
    o.T = static_cast<int>(lm.run.max_seq_len.value_or(lm.model->config().sequence_len));
    o.data_dir = data_dir();
    const int64_t steps = std::max<int64_t>(1, a->split_tokens / (static_cast<int64_t>(o.B) * o.T));
    std::printf("model %s step %lld: %lld batches of %d x %d tokens per split\n", lm.tag.c_str(),
                static_cast<long long>(lm.step), static_cast<long long>(steps), o.B, o.T);
    LocalCommunicator local;
    const auto token_bytes = tok.token_bytes();
    const bool print_progress = cluster::env_int("RANK").value_or(0) == 0;
    const int64_t tokens_per_batch = static_cast<int64_t>(o.B) * o.T;
    for (const char* split : {"train", "val"}) {
      o.split = split;
      data::DataLoader dl(tok, o);
      Timer timer;
      double last_line = 0;
      auto progress = [&](int64_t done, int64_t total) {
        const double elapsed = timer.seconds();
        const bool new_tenth = done * 10 / total != (done - 1) * 10 / total;
        if (!new_tenth && elapsed - last_line < kProgressEverySeconds) return;
        last_line = elapsed;
        const int64_t tokens = done * tokens_per_batch;
        std::printf("%s: %lld/%lld batches (%.0f%%) | %lld tokens | %.2f s | %.0f tok/s\n", split,
                    static_cast<long long>(done), static_cast<long long>(total), 100.0 * done / total,
                    static_cast<long long>(tokens), elapsed, elapsed > 0 ? tokens / elapsed : 0.0);
        std::fflush(stdout);
      };
      const double bpb = evaluate_bpb(*lm.model, dl, steps, token_bytes, local,
                                      print_progress ? std::function<void(int64_t, int64_t)>(progress) : nullptr);
      std::printf("%s bpb: %.6f\n", split, bpb);
      card[std::string(split) + " bpb"] = bpb;
      std::fflush(stdout);
    }
  }
}
}  // namespace

void register_base_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c =
      app.add_subcommand("base-eval", "CORE metric, train/val bits per byte and samples of a base checkpoint");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_checkpoint_options(c, a->ckpt);
  c->add_option("--device-batch-size", a->device_batch_size, "rows per batch (0 = the checkpoint's)")
      ->capture_default_str();
  c->add_option("--split-tokens", a->split_tokens,
                "tokens evaluated per split (rounded down to whole batches of B x T, at least one)")
      ->capture_default_str();
  add_threads_option(c, a->threads);
  CLI::Option* eval_opt =
      c->add_option("--eval", a->eval,
                    "comma-separated subset of core, bpb, sample (default all; without the eval bundle the default "
                    "skips core with a note)")
          ->capture_default_str();
  c->add_option("--max-per-task", a->max_per_task, "max examples per CORE task (-1 = all)")->capture_default_str();
  c->add_option("--dtype", a->dtype,
                "number format of the matrix products: float32, or bfloat16 (bf16 operands, fp32 accumulation; needs "
                "AVX512_BF16 or AMX)")
      ->capture_default_str();
  c->callback([a, eval_opt] {
    const EvalModes modes = parse_eval_modes(a->eval);
    const ComputeDtype dtype = parse_compute_dtype(a->dtype, "--dtype");
    if (a->threads > 0) set_num_threads(a->threads);
    InferenceModel im = load_for_inference(CheckpointSource::Base, a->ckpt.model_tag, a->ckpt.step);
    im.lm.model->set_compute_dtype(dtype);
    const Tokenizer& tok = im.tokenizer;
    LoadedModel& lm = im.lm;
    const bool master = cluster::env_int("RANK").value_or(0) == 0;
    nlohmann::ordered_json card;
    card["model"] = lm.tag + " step " + std::to_string(lm.step);
    if (modes.bpb) card["split tokens"] = a->split_tokens;
    if (modes.sample && master) print_base_samples(lm, tok, card);
    if (modes.bpb) evaluate_splits(lm, tok, *a, card);
    if (modes.core) run_core_eval(lm, tok, a->max_per_task, eval_opt->count() > 0, card);
    if (master) log_report_section("base-model-evaluation", "Base model evaluation", card);
  });
}

}  // namespace nanochat::cli
