#pragma once
// Tasks: datasets of conversations, each with how an answer to it is judged (nanochat's tasks/,
// tasks/common.py Task, TaskMixture, TaskSequence, render_mc; commit 92d63d4).
//
// A Task is a list of examples. An example is a conversation that ends with the assistant's
// reference answer, plus what judging needs (the answer letters of a multiple-choice question, a
// task's own fields such as HumanEval's test code). Training renders the whole conversation
// (tokenizer/conversation.h render_conversation); evaluation primes the assistant with everything
// but the last message (render_for_completion) and judges what the model writes with evaluate().
//
// Indexing: a Task's examples are 0 .. size()-1. TaskSlice is nanochat's start/stop/step view,
// TaskMixture its deterministic shuffle of several tasks (Python's random.Random(42), so that the
// order is nanochat's own), TaskSequence the tasks one after the other.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/tokenizer/conversation.h"

namespace nanochat::tasks {

/// How a task is evaluated (nanochat Task.eval_type).
enum class EvalType {
  Categorical,  ///< the answer is one of `letters`: scored by the logits over the letters' tokens
  Generative,   ///< the model writes an answer, judged by evaluate()
};

/// One example of a task.
struct Example {
  Conversation conversation;         ///< ends with the assistant's reference answer
  std::vector<std::string> letters;  ///< Categorical: the answer letters ("A", "B", ...); else empty
  nlohmann::json extra;              ///< task-specific fields judging needs (null when none)
};

/// A dataset of examples (nanochat tasks/common.py Task).
class Task {
 public:
  virtual ~Task() = default;
  /// The task's name as nanochat's chat_eval spells it ("ARC-Easy", "MMLU", "GSM8K", ...).
  virtual std::string name() const = 0;
  virtual EvalType eval_type() const = 0;
  /// Number of examples (>= 0).
  virtual int64_t size() const = 0;
  /// Example `index` in [0, size()). Throws nanochat::Error for an index out of range (naming the
  /// task, the index and the size) or a malformed row (naming the file and the row).
  virtual Example get(int64_t index) const = 0;
  /// Whether `completion` (the assistant's text: for Categorical the chosen letter, for
  /// Generative everything the model wrote, tool output included) answers `ex` correctly
  /// (nanochat's Task.evaluate). Never throws for any completion text.
  virtual bool evaluate(const Example& ex, const std::string& completion) const = 0;
  /// RL reward of `completion` (nanochat's Task.reward); by default 1.0 when evaluate() holds.
  virtual double reward(const Example& ex, const std::string& completion) const {
    return evaluate(ex, completion) ? 1.0 : 0.0;
  }
};

using TaskPtr = std::shared_ptr<const Task>;

/// nanochat's start/stop/step view of a task: examples start, start+step, ... below stop
/// (stop < 0: the task's size). Throws nanochat::Error when start < 0, step < 1, stop < start or
/// stop > the task's size.
class TaskSlice final : public Task {
 public:
  TaskSlice(TaskPtr task, int64_t start, int64_t stop = -1, int64_t step = 1);
  std::string name() const override { return task_->name(); }
  EvalType eval_type() const override { return task_->eval_type(); }
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  bool evaluate(const Example& ex, const std::string& completion) const override {
    return task_->evaluate(ex, completion);
  }
  double reward(const Example& ex, const std::string& completion) const override {
    return task_->reward(ex, completion);
  }

 private:
  TaskPtr task_;
  int64_t start_, step_, size_;
};

/// Several tasks as one, in nanochat's TaskMixture order: the (task, index) pairs of all tasks in
/// order, shuffled once by Python's random.Random(42).shuffle. A task listed twice is two epochs
/// of it. evaluate()/reward() are not defined for a mixture (throw nanochat::Error): judge an
/// example with the task it came from (origin()).
class TaskMixture final : public Task {
 public:
  explicit TaskMixture(std::vector<TaskPtr> tasks);
  std::string name() const override { return "mixture"; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  Example get(int64_t index) const override;
  bool evaluate(const Example&, const std::string&) const override;
  /// The task and the index within it that example `index` comes from.
  std::pair<const Task*, int64_t> origin(int64_t index) const;

 private:
  std::vector<TaskPtr> tasks_;
  std::vector<std::pair<int32_t, int64_t>> index_;  // (task, index within it), shuffled
};

/// Tasks one after the other (nanochat's TaskSequence). evaluate() throws like TaskMixture's.
class TaskSequence final : public Task {
 public:
  explicit TaskSequence(std::vector<TaskPtr> tasks);
  std::string name() const override { return "sequence"; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return total_; }
  Example get(int64_t index) const override;
  bool evaluate(const Example&, const std::string&) const override;

 private:
  std::vector<TaskPtr> tasks_;
  int64_t total_ = 0;
};

/// nanochat's multiple-choice prompt (tasks/common.py render_mc): "Multiple Choice question: Q\n",
/// then "- choice=L\n" per choice (the letter after the choice, no space before it), then
/// "\nRespond only with the letter of the correct answer.". Throws nanochat::Error when the
/// numbers of letters and choices differ.
std::string render_mc(const std::string& question, const std::vector<std::string>& letters,
                      const std::vector<std::string>& choices);

}  // namespace nanochat::tasks
