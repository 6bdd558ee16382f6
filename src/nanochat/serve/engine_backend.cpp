#include "nanochat/serve/engine_backend.h"

#include <memory>

#include "nanochat/core/error.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/serve/tool_text.h"
#include "nanochat/tokenizer/conversation.h"

namespace nanochat::serve {

namespace {

class EngineBackend : public Backend {
 public:
  explicit EngineBackend(InferenceModel m) : m_(std::move(m)), engine_(*m_.lm.model, m_.tokenizer) {}

  std::vector<RowEnd> generate(const std::vector<int32_t>& prompt, const SampleParams& params,
                               const std::function<Control(int, const std::string&)>& on_piece) override {
    GenerateOptions o;
    o.num_samples = params.n;
    o.max_tokens = params.max_tokens;
    o.temperature = params.temperature;
    o.top_k = params.top_k;
    o.top_p = params.top_p;
    o.seed = params.seed;
    o.presence_penalty = params.presence_penalty;
    o.frequency_penalty = params.frequency_penalty;
    o.tools = true;
    const Tokenizer& tok = m_.tokenizer;
    const auto r = engine_.generate(prompt, o, [&](const TokenEvent& ev) {
      switch (on_piece(ev.row, api_token_text(tok, ev.token))) {
        case Control::Continue:
          return StreamControl::Continue;
        case Control::StopRow:
          return StreamControl::StopRow;
        case Control::StopAll:
          return StreamControl::Stop;
      }
      return StreamControl::Stop;
    });
    std::vector<RowEnd> ends;
    for (const auto& row : r.rows)
      ends.push_back({finish_reason_name(row.finish), static_cast<int>(row.tokens.size())});
    return ends;
  }

 private:
  InferenceModel m_;
  Engine engine_;
};

}  // namespace

ServedModel engine_model(CheckpointSource source, const std::string& tag, int64_t step) {
  auto first = std::make_shared<InferenceModel>(load_for_inference(source, tag, step));
  ServedModel m;
  m.id = str_cat(checkpoint_source_name(source), "-", first->lm.tag, "-step", first->lm.step);
  {
    Engine probe(*first->lm.model, first->tokenizer);
    m.context_len = probe.max_context();
  }
  const std::string resolved_tag = first->lm.tag;
  const int64_t resolved_step = first->lm.step;
  auto tok = std::make_shared<const Tokenizer>(first->tokenizer);
  m.render = [tok](const std::vector<ChatMessage>& messages) {
    Conversation conv;
    for (const auto& msg : messages) {
      Message m = Message::plain(parse_role(msg.role), msg.content);
      // An answer sent back holds its calculator blocks as text: the model reads them as its tokens.
      if (m.role == Message::Role::Assistant) m.parts = assistant_parts_from_text(msg.content);
      conv.messages.push_back(std::move(m));
    }
    try {
      return render_for_reply(*tok, conv);
    } catch (const Error& e) {
      throw ApiError(400, "invalid_request_error", "messages", e.what());
    }
  };
  // Worker 0 takes the copy loaded here; the others load their own (same tag and step, so every
  // worker serves the same weights even if a newer checkpoint appears meanwhile).
  auto spare = std::make_shared<std::shared_ptr<InferenceModel>>(first);
  m.make = [source, resolved_tag, resolved_step, spare](int index) -> std::unique_ptr<Backend> {
    if (index == 0 && *spare) {
      InferenceModel im = std::move(**spare);
      spare->reset();
      return std::make_unique<EngineBackend>(std::move(im));
    }
    return std::make_unique<EngineBackend>(load_for_inference(source, resolved_tag, resolved_step));
  };
  return m;
}

}  // namespace nanochat::serve
