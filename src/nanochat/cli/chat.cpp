// `nanochat chat`: a simple terminal chat with a checkpoint (nanochat scripts/chat_cli.py;
// docs/nanochat.md 7.2): conversation tokens BOS, <|user_start|> text <|user_end|> <|assistant_start|> ...,
// streamed up to 256 tokens per reply, stopping at <|assistant_end|> or <|bos|>.
#include <cstdio>
#include <iostream>
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
struct ChatArgs {
  CheckpointChoice ckpt;
  std::string prompt;
  double temperature = 0.6;
  int top_k = 50;
  uint64_t seed = 42;
  int max_tokens = 256;
  int threads = 0;
};
}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* c = app.add_subcommand("chat", "chat with a checkpoint in the terminal (nanochat chat_cli)");
  add_checkpoint_options(c, a->ckpt);
  c->add_option("-p,--prompt", a->prompt, "answer this one prompt and exit");
  c->add_option("-t,--temperature", a->temperature, "sampling temperature")->capture_default_str();
  c->add_option("-k,--top-k", a->top_k, "top-k sampling")->capture_default_str();
  c->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  c->add_option("--max-tokens", a->max_tokens, "tokens per reply")->capture_default_str();
  add_threads_option(c, a->threads);
  c->callback([a] {
    if (a->threads > 0) set_num_threads(a->threads);
    const Tokenizer tok = Tokenizer::load(tokenizer_dir());
    LoadedModel lm = load_trained_model(a->ckpt.model_tag, a->ckpt.step);
    require_tokenizer_vocab(lm, tok.vocab_size());
    const int32_t bos = tok.bos_id(), us = tok.encode_special("<|user_start|>"),
                  ue = tok.encode_special("<|user_end|>"), as = tok.encode_special("<|assistant_start|>"),
                  ae = tok.encode_special("<|assistant_end|>");
    const bool single = !a->prompt.empty();
    if (!single)
      std::printf("nanochat chat (model %s step %lld). Type 'quit' or 'exit' to leave, 'clear' to start over.\n",
                  lm.tag.c_str(), static_cast<long long>(lm.step));
    std::vector<int32_t> conv = {bos};
    SampleOptions so;
    so.temperature = a->temperature;
    so.top_k = a->top_k;
    so.stop_ids = {ae, bos};
    uint64_t turn = 0;
    for (;;) {
      std::string user;
      if (single) {
        user = a->prompt;
      } else {
        std::printf("\nUser: ");
        std::fflush(stdout);
        if (!std::getline(std::cin, user)) break;
        if (user == "quit" || user == "exit") break;
        if (user == "clear") {
          conv = {bos};
          std::printf("(conversation cleared)\n");
          continue;
        }
        if (user.empty()) continue;
      }
      conv.push_back(us);
      auto ids = tok.encode(user);
      conv.insert(conv.end(), ids.begin(), ids.end());
      conv.push_back(ue);
      conv.push_back(as);
      const int64_t room = lm.model->config().sequence_len * 10 - static_cast<int64_t>(conv.size());
      if (room < 2) {
        std::printf("\n(the conversation is full; type 'clear')\n");
        if (single) break;
        continue;
      }
      so.max_tokens = static_cast<int>(std::min<int64_t>(a->max_tokens, room - 1));
      so.seed = a->seed + turn++;
      std::printf("\nAssistant: ");
      std::fflush(stdout);
      auto reply = generate(*lm.model, conv, so, [&](int32_t id) {
        std::string s = tok.decode({id});
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n");
      conv.insert(conv.end(), reply.begin(), reply.end());
      conv.push_back(ae);
      if (single) break;
    }
  });
}

}  // namespace nanochat::cli
