#include "nanochat/serve/completion.h"

#include <algorithm>
#include <chrono>

namespace nanochat::serve {

using json = nlohmann::json;

Prepared prepare(const std::string& body, const RequestLimits& limits, const ServedModel& model) {
  Prepared p;
  p.req = parse_chat_request(body, limits);
  // Absent (or "") means the served model; another name is refused as OpenAI refuses it.
  if (!p.req.model.empty() && p.req.model != model.id)
    throw ApiError(
        404, "invalid_request_error", "model",
        "the model '" + p.req.model + "' does not exist; this server serves '" + model.id + "' (GET /v1/models)",
        "model_not_found");
  p.prompt = model.render(p.req.messages);
  const int64_t room = model.context_len - static_cast<int64_t>(p.prompt.size());
  if (room < 1)
    throw ApiError(400, "context_length_exceeded", "messages",
                   "the conversation is " + std::to_string(p.prompt.size()) + " tokens; this model's context is " +
                       std::to_string(model.context_len) +
                       " tokens including the answer: shorten it or start a new conversation");
  p.params.n = p.req.n;
  p.params.temperature = p.req.temperature;
  p.params.top_k = p.req.top_k;
  p.params.top_p = p.req.top_p;
  p.params.presence_penalty = p.req.presence_penalty;
  p.params.frequency_penalty = p.req.frequency_penalty;
  p.params.max_tokens = static_cast<int>(std::min<int64_t>(p.req.max_tokens, room));
  p.params.seed =
      p.req.seed ? *p.req.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  p.id = new_completion_id();
  p.model = model.id;
  p.created = unix_now();
  return p;
}

void run_completion(Backend& backend, Job& job, const Prepared& p) {
  JobEvent started = JobEvent::of(JobEvent::Kind::Started);
  started.prompt_tokens = static_cast<int>(p.prompt.size());
  job.post(started);
  std::vector<TextStream> streams(static_cast<size_t>(p.params.n), TextStream(p.req.stop));
  bool timed_out = false;
  int generated = 0;
  auto piece = [&](int row, std::string text) {
    if (text.empty()) return;
    JobEvent e = JobEvent::of(JobEvent::Kind::Piece, row, std::move(text));
    e.generated = generated;
    job.post(std::move(e));
  };
  const auto ends = backend.generate(p.prompt, p.params, [&](int row, const std::string& bytes) {
    ++generated;
    if (job.cancelled()) return Control::StopAll;
    if (Clock::now() >= job.deadline()) {
      timed_out = true;
      return Control::StopAll;
    }
    auto& ts = streams[static_cast<size_t>(row)];
    piece(row, ts.push(bytes));
    return ts.stopped() ? Control::StopRow : Control::Continue;
  });
  for (int row = 0; row < p.params.n; ++row) {
    auto& ts = streams[static_cast<size_t>(row)];
    piece(row, ts.finish());
    JobEvent done = JobEvent::of(JobEvent::Kind::RowDone, row);
    done.end = row < static_cast<int>(ends.size()) ? ends[static_cast<size_t>(row)] : RowEnd{"stop", 0};
    std::string& r = done.end.finish_reason;
    if (ts.stopped())
      r = "stop";  // a stop string: the row was ended on purpose
    else if (r == "context" || (r == "cancelled" && timed_out))
      r = "length";  // cut by the context or the time limit
    job.post(std::move(done));
  }
}

WholeAnswer::WholeAnswer(const Prepared& p)
    : p_(p), text_(static_cast<size_t>(p.params.n)), finish_(static_cast<size_t>(p.params.n), "stop") {}

void WholeAnswer::add(const JobEvent& e) {
  if (e.kind == JobEvent::Kind::Started) prompt_tokens_ = e.prompt_tokens;
  if (e.row < 0 || e.row >= static_cast<int>(text_.size())) return;
  if (e.kind == JobEvent::Kind::Piece) text_[static_cast<size_t>(e.row)] += e.text;
  if (e.kind == JobEvent::Kind::RowDone) {
    finish_[static_cast<size_t>(e.row)] = e.end.finish_reason;
    completion_tokens_ += e.end.tokens;
  }
}

std::string WholeAnswer::json_text() const {
  json choices = json::array();
  for (size_t i = 0; i < text_.size(); ++i)
    choices.push_back({{"index", i},
                       {"message", {{"role", "assistant"}, {"content", text_[i]}}},
                       {"logprobs", nullptr},
                       {"finish_reason", finish_[i]}});
  json j = {{"id", p_.id},
            {"object", "chat.completion"},
            {"created", p_.created},
            {"model", p_.model},
            {"choices", choices},
            {"usage",
             {{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_}}}};
  return dump_json(j);
}

std::string ChunkWriter::chunk(const json& choices, const json* usage) const {
  json j = {{"id", p_.id},
            {"object", "chat.completion.chunk"},
            {"created", p_.created},
            {"model", p_.model},
            {"choices", choices}};
  if (usage) j["usage"] = *usage;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ChunkWriter::event(const JobEvent& e) {
  if (done_) return {};
  switch (e.kind) {
    case JobEvent::Kind::Started: {
      prompt_tokens_ = e.prompt_tokens;
      std::string out;
      for (int i = 0; i < p_.params.n; ++i)
        out += chunk(json::array({{{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}}));
      return out;
    }
    case JobEvent::Kind::Piece:
      return chunk(json::array(
          {{{"index", e.row}, {"delta", {{"content", e.text}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
    case JobEvent::Kind::RowDone:
      completion_tokens_ += e.end.tokens;
      return chunk(json::array({{{"index", e.row},
                                 {"delta", json::object()},
                                 {"logprobs", nullptr},
                                 {"finish_reason", e.end.finish_reason}}}));
    case JobEvent::Kind::Failed:
      return error(e.text, e.type);
    case JobEvent::Kind::Finished: {
      std::string out;
      if (p_.req.include_usage) {
        const json usage = {{"prompt_tokens", prompt_tokens_},
                            {"completion_tokens", completion_tokens_},
                            {"total_tokens", prompt_tokens_ + completion_tokens_}};
        out += chunk(json::array(), &usage);
      }
      done_ = true;
      return out + "data: [DONE]\n\n";
    }
  }
  return {};
}

std::string ChunkWriter::error(const std::string& message, const std::string& type) {
  done_ = true;
  return "data: " + error_json(message, type) + "\n\ndata: [DONE]\n\n";
}

}  // namespace nanochat::serve
