// `nanochat sample`: generate text from a trained checkpoint with the inference engine
// (engine/engine.h: nanochat's Engine; nanochat's base_train sampling; docs/nanochat.md 3.7, 7.1).
// Each prompt is BOS + its text; --num-samples rows share one prefill. One row streams token by
// token; several rows are printed when they are done.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/core/threads.h"
#include "nanochat/engine/engine.h"
#include "nanochat/engine/sample_prompts.h"
#include "nanochat/model/gpt.h"

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
  std::string dtype = "float32";
};

void print_bytes(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}
}  // namespace

void register_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* c = app.add_subcommand("sample", "generate text from a trained checkpoint (KV-cache decoding)");
  add_checkpoint_options(c, a->ckpt);
  add_source_option(c, a->ckpt, "base");
  c->add_option("-p,--prompt", a->prompts, "prompt(s); default: base_train's seven sample prompts");
  c->add_option("-n,--max-tokens", a->max_tokens, "new tokens per sample")->capture_default_str();
  c->add_option("-t,--temperature", a->temperature, "0 = greedy")->capture_default_str();
  c->add_option("-k,--top-k", a->top_k, "sample among the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  c->add_option("--num-samples", a->num_samples, "samples per prompt (one prefill, then one row each)")
      ->capture_default_str();
  add_threads_option(c, a->threads);
  c->add_option("--dtype", a->dtype,
                "number format of the matrix products: float32, or bfloat16 (bf16 operands, fp32 accumulation; needs "
                "AVX512_BF16 or AMX)")
      ->capture_default_str();
  c->callback([a] {
    if (a->threads > 0) set_num_threads(a->threads);
    const ComputeDtype dtype = parse_compute_dtype(a->dtype, "--dtype");
    InferenceModel im = load_for_inference(parse_checkpoint_source(a->ckpt.source), a->ckpt.model_tag, a->ckpt.step);
    im.lm.model->set_compute_dtype(dtype);
    const Tokenizer& tok = im.tokenizer;
    std::printf("model %s step %lld (%s)\n", im.lm.tag.c_str(), static_cast<long long>(im.lm.step), im.lm.dir.c_str());
    std::vector<std::string> prompts = a->prompts;
    if (prompts.empty()) prompts.assign(kBaseSamplePrompts.begin(), kBaseSamplePrompts.end());
    Engine engine(*im.lm.model, tok);
    GenerateOptions o;
    o.max_tokens = a->max_tokens;
    o.temperature = std::max(a->temperature, 0.0);
    o.top_k = a->top_k;
    o.seed = a->seed;
    o.num_samples = std::max(a->num_samples, 1);
    for (const auto& p : prompts) {
      std::vector<int32_t> ids = tok.encode(p);
      ids.insert(ids.begin(), tok.bos_id());
      if (o.num_samples == 1) {
        print_bytes("---\n" + p);
        engine.generate(ids, o, [&](const TokenEvent& e) {
          print_bytes(tok.decode({e.token}));
          return StreamControl::Continue;
        });
        std::printf("\n");
        continue;
      }
      const GenerateResult r = engine.generate(ids, o);
      for (const GeneratedRow& row : r.rows) print_bytes("---\n" + p + tok.decode(row.tokens) + "\n");
    }
  });
}

}  // namespace nanochat::cli
