// Conversations from JSONL files (jsonl_task.h).
#include "nanochat/tasks/jsonl_task.h"

#include <filesystem>
#include <string_view>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"

namespace nanochat::tasks {

std::string conversation_order_problem(const Conversation& conv) {
  const auto& m = conv.messages;
  size_t first = 0;
  if (!m.empty() && m[0].role == Message::Role::System) first = 1;
  if (m.size() < first + 2)
    return str_cat("a conversation needs a user message and the assistant's answer, got ", m.size(), " message(s)");
  for (size_t i = first; i < m.size(); ++i) {
    const Message::Role want = (i - first) % 2 == 0 ? Message::Role::User : Message::Role::Assistant;
    if (m[i].role != want)
      return str_cat("message ", i, " is from the ", role_name(m[i].role), " where the ", role_name(want),
                     " was expected (an optional system message, then user and assistant alternating)");
  }
  if (m.back().role != Message::Role::Assistant) return "the last message must be the assistant's";
  return "";
}

JsonlTask::JsonlTask(const std::string& path) : path_(path), name_(std::filesystem::path(path).filename().string()) {
  const std::string text = read_file(path, "check the path given to --train-jsonl / --val-jsonl");
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view row(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    Conversation conv;
    try {
      nlohmann::json j = nlohmann::json::parse(row);
      if (j.is_array()) j = nlohmann::json{{"messages", std::move(j)}};
      conv = conversation_from_json(j);
    } catch (const std::exception& e) {
      fail(path, " row ", line, ": ", e.what(),
           " (each line must be one conversation: {\"messages\": [{\"role\": ..., \"content\": ...}, ...]})");
    }
    const std::string problem = conversation_order_problem(conv);
    if (!problem.empty()) fail(path, " row ", line, ": ", problem);
    rows_.push_back(std::move(conv));
    lines_.push_back(line);
  }
  if (rows_.empty()) fail(path, " holds no conversation (one JSON conversation per line expected)");
}

Example JsonlTask::get(int64_t index) const {
  if (index < 0 || index >= size())
    fail("task ", name_, ": example ", index, " is out of range (the task has ", size(), " examples)");
  Example ex;
  ex.conversation = rows_[static_cast<size_t>(index)];
  return ex;
}

bool JsonlTask::evaluate(const Example&, const std::string&) const {
  fail("the conversations of ", path_, " carry no way to judge answers; they are for training");
}

std::vector<std::string> jsonl_paths(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    size_t pos = 0;
    while (pos <= arg.size()) {
      size_t comma = arg.find(',', pos);
      if (comma == std::string::npos) comma = arg.size();
      if (comma > pos) paths.push_back(arg.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  return paths;
}

TaskPtr jsonl_tasks(const std::vector<std::string>& paths) {
  std::vector<TaskPtr> tasks;
  for (const std::string& p : jsonl_paths(paths)) tasks.push_back(std::make_shared<JsonlTask>(p));
  if (tasks.empty()) fail("no JSONL file of conversations was given");
  if (tasks.size() == 1) return tasks.front();
  return std::make_shared<TaskSequence>(std::move(tasks));
}

}  // namespace nanochat::tasks
