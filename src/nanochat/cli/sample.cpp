// `nanochat sample`: generate text from a trained checkpoint with the KV cache
// (nanochat's base_train sampling and engine.py; docs/nanochat.md 3.7, 7.1).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/cli/commands.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/threads.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/model_io.h"
#include "nanochat/train/sample.h"

namespace nanochat::cli {

namespace {
struct SampleArgs {
  CheckpointChoice ckpt;
  std::vector<std::string> prompts;
  int max_tokens = 64;
  double temperature = 0.8;
  int top_k = 50;
  uint64_t seed = 42;
  int num_samples = 1;
  int threads = 0;
};
}  // namespace

void register_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* c = app.add_subcommand("sample", "generate text from a trained checkpoint (KV-cache decoding)");
  add_checkpoint_options(c, a->ckpt);
  c->add_option("-p,--prompt", a->prompts, "prompt(s); default: base_train's seven sample prompts");
  c->add_option("-n,--max-tokens", a->max_tokens, "new tokens per sample")->capture_default_str();
  c->add_option("-t,--temperature", a->temperature, "0 = greedy")->capture_default_str();
  c->add_option("-k,--top-k", a->top_k, "sample among the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  c->add_option("--num-samples", a->num_samples, "samples per prompt")->capture_default_str();
  add_threads_option(c, a->threads);
  c->callback([a] {
    if (a->threads > 0) set_num_threads(a->threads);
    const Tokenizer tok = Tokenizer::load(tokenizer_dir());
    LoadedModel lm = load_trained_model(a->ckpt.model_tag, a->ckpt.step);
    require_tokenizer_vocab(lm, tok.vocab_size());
    std::printf("model %s step %lld (%s)\n", lm.tag.c_str(), static_cast<long long>(lm.step), lm.dir.c_str());
    std::vector<std::string> prompts = a->prompts;
    if (prompts.empty())
      prompts = {"The capital of France is",
                 "The chemical symbol of gold is",
                 "If yesterday was Friday, then tomorrow will be",
                 "The opposite of hot is",
                 "The planets of the solar system are:",
                 "My favorite color is",
                 "If 5*x + 3 = 13, then x is"};
    SampleOptions so;
    so.max_tokens = a->max_tokens;
    so.temperature = a->temperature;
    so.top_k = a->top_k;
    so.stop_ids = {tok.bos_id()};
    for (const auto& p : prompts) {
      for (int s = 0; s < a->num_samples; ++s) {
        so.seed = a->seed + static_cast<uint64_t>(s);
        std::vector<int32_t> ids = tok.encode(p);
        ids.insert(ids.begin(), tok.bos_id());
        std::printf("---\n%s", p.c_str());
        std::fflush(stdout);
        std::string pending;  // bytes of an incomplete UTF-8 sequence held back while streaming
        generate(*lm.model, ids, so, [&](int32_t id) {
          pending += tok.decode({id});
          std::fwrite(pending.data(), 1, pending.size(), stdout);
          std::fflush(stdout);
          pending.clear();
        });
        std::printf("\n");
      }
    }
  });
}

}  // namespace nanochat::cli
