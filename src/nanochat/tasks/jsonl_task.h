#pragma once
// Conversations from a JSONL file of the user's own (what nanochat's former tasks/customjson.py
// CustomJSON read): one conversation per non-blank line, either nanochat's object form
// {"messages": [{"role": ..., "content": ...}, ...]} (tokenizer/conversation.h
// conversation_from_json) or a bare array of those messages. Messages must be an optional system
// message, then user and assistant alternating, starting with a user and ending with the
// assistant (so that the conversation trains something; render_conversation's order).
//
// The whole file is read and checked when the task is made, so a malformed row stops a run before
// its first step instead of hours into it.
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/tasks/task.h"

namespace nanochat::tasks {

class JsonlTask final : public Task {
 public:
  /// Reads and checks every line of `path`. Throws nanochat::Error: "cannot read <path>" for a
  /// missing or unreadable file; "<path> row <n>: <what>" (n counts lines from 1) for a line that
  /// is not JSON, not a conversation, or whose roles are out of order; "<path> holds no
  /// conversation" for a file without one.
  explicit JsonlTask(const std::string& path);
  /// The file name without its folder (for logs).
  std::string name() const override { return name_; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  Example get(int64_t index) const override;
  /// Not defined: a conversation file carries no way to judge answers (throws nanochat::Error).
  bool evaluate(const Example&, const std::string&) const override;
  /// The line number (from 1) of example `index` in the file.
  int64_t line_of(int64_t index) const { return lines_.at(static_cast<size_t>(index)); }
  const std::string& path() const { return path_; }

 private:
  std::string path_, name_;
  std::vector<Conversation> rows_;
  std::vector<int64_t> lines_;
};

/// The order check JsonlTask applies to one conversation: "" when it is an optional system
/// message, then user/assistant alternating from a user, ending with the assistant; else what is
/// wrong (naming the message index).
std::string conversation_order_problem(const Conversation& conv);

/// The files of --train-jsonl / --val-jsonl values: each value split at commas, empty parts
/// dropped, in order.
std::vector<std::string> jsonl_paths(const std::vector<std::string>& args);

/// A task of several JSONL files, one after the other (TaskSequence of JsonlTask); `paths` may be
/// given repeated or comma-separated ("a.jsonl,b.jsonl"). Throws like JsonlTask, or when `paths`
/// names no file.
TaskPtr jsonl_tasks(const std::vector<std::string>& paths);

}  // namespace nanochat::tasks
