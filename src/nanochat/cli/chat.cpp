// `nanochat chat`: a terminal chat with a checkpoint (nanochat scripts/chat_cli.py; docs/nanochat.md
// 7.2). The conversation is kept as messages and rendered with nanochat's chat template each turn
// (tokenizer/conversation.h render_for_reply); the answer comes from the inference engine with the
// calculator tool (engine/engine.h), streamed as it is generated, at most --max-tokens tokens.
// -p answers one prompt and exits; otherwise 'quit'/'exit' leave and 'clear' starts over.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/cli/commands.h"
#include "nanochat/core/threads.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/conversation.h"

namespace nanochat::cli {

namespace {
struct ChatArgs {
  CheckpointChoice ckpt;
  std::string prompt;
  std::string system;
  double temperature = 0.6;
  int top_k = 50;
  uint64_t seed = 42;
  int max_tokens = 256;
  int threads = 0;
};

void print_bytes(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// One assistant turn: renders the conversation, streams the answer, appends it as a message.
// Returns false when the conversation no longer fits the model's context.
bool answer(Engine& engine, Conversation& conv, const GenerateOptions& base, int max_tokens) {
  const Tokenizer& tok = engine.tokenizer();
  const std::vector<int32_t> ids = render_for_reply(tok, conv);
  const int64_t room = engine.max_context() - static_cast<int64_t>(ids.size());
  if (room < 1) return false;
  GenerateOptions o = base;
  o.max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, room));
  print_bytes("\nAssistant: ");
  const GenerateResult r = engine.generate(ids, o, [&](const TokenEvent& e) {
    print_bytes(tok.decode({e.token}));
    return StreamControl::Continue;
  });
  print_bytes("\n");
  Message m;
  m.role = Message::Role::Assistant;
  m.parts = assistant_parts_from_tokens(tok, r.rows[0].tokens);
  conv.messages.push_back(std::move(m));
  return true;
}
}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* c = app.add_subcommand("chat", "chat with a checkpoint in the terminal (nanochat chat_cli)");
  add_checkpoint_options(c, a->ckpt);
  add_source_option(c, a->ckpt, "sft");
  c->add_option("-p,--prompt", a->prompt, "answer this one prompt and exit");
  c->add_option("--system", a->system, "a system message (merged into the first user message, as nanochat does)");
  c->add_option("-t,--temperature", a->temperature, "sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("-k,--top-k", a->top_k, "top-k sampling (0 = all tokens)")->capture_default_str();
  c->add_option("--seed", a->seed, "sampling seed (turn n uses seed + n)")->capture_default_str();
  c->add_option("--max-tokens", a->max_tokens, "tokens per reply")->capture_default_str();
  add_threads_option(c, a->threads);
  c->callback([a] {
    if (a->threads > 0) set_num_threads(a->threads);
    InferenceModel im = load_for_inference(parse_checkpoint_source(a->ckpt.source), a->ckpt.model_tag, a->ckpt.step);
    Engine engine(*im.lm.model, im.tokenizer);
    const bool single = !a->prompt.empty();
    if (!single)
      std::printf("nanochat chat (%s model %s step %lld). Type 'quit' or 'exit' to leave, 'clear' to start over.\n",
                  checkpoint_source_name(im.source), im.lm.tag.c_str(), static_cast<long long>(im.lm.step));
    GenerateOptions o;
    o.temperature = std::max(a->temperature, 0.0);
    o.top_k = a->top_k;
    Conversation conv;
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
          conv.messages.clear();
          std::printf("(conversation cleared)\n");
          continue;
        }
        if (user.empty()) continue;
      }
      if (conv.messages.empty() && !a->system.empty())
        conv.messages.push_back(Message::plain(Message::Role::System, a->system));
      conv.messages.push_back(Message::plain(Message::Role::User, user));
      o.seed = a->seed + turn++;
      if (!answer(engine, conv, o, a->max_tokens)) {
        conv.messages.pop_back();
        std::printf("\n(the conversation is longer than the model's context of %lld tokens; type 'clear')\n",
                    static_cast<long long>(engine.max_context()));
      }
      if (single) break;
    }
  });
}

}  // namespace nanochat::cli
