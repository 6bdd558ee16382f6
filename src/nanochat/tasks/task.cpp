// Task views, mixtures and the multiple-choice prompt (task.h).
#include "nanochat/tasks/task.h"

#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/core/py_random.h"

namespace nanochat::tasks {

namespace {
void check_index(const Task& t, int64_t index) {
  if (index < 0 || index >= t.size())
    fail("task ", t.name(), ": example ", index, " is out of range (the task has ", t.size(), " examples)");
}
}  // namespace

TaskSlice::TaskSlice(TaskPtr task, int64_t start, int64_t stop, int64_t step)
    : task_(std::move(task)), start_(start), step_(step) {
  NC_CHECK(task_ != nullptr, "a slice of no task");
  const int64_t n = task_->size();
  if (stop < 0) stop = n;
  if (start < 0 || step < 1 || stop < start || stop > n)
    fail("task ", task_->name(), ": the slice start ", start, ", stop ", stop, ", step ", step, " is not within its ",
         n, " examples (need 0 <= start <= stop <= size, step >= 1)");
  size_ = (stop - start + step - 1) / step;
}

Example TaskSlice::get(int64_t index) const {
  check_index(*this, index);
  return task_->get(start_ + index * step_);
}

TaskMixture::TaskMixture(std::vector<TaskPtr> tasks) : tasks_(std::move(tasks)) {
  for (size_t t = 0; t < tasks_.size(); ++t) {
    NC_CHECK(tasks_[t] != nullptr, "a mixture of a missing task");
    for (int64_t i = 0; i < tasks_[t]->size(); ++i) index_.emplace_back(static_cast<int32_t>(t), i);
  }
  PyRandom rng(42);
  rng.shuffle(index_);
}

std::pair<const Task*, int64_t> TaskMixture::origin(int64_t index) const {
  check_index(*this, index);
  const auto& [t, i] = index_[static_cast<size_t>(index)];
  return {tasks_[static_cast<size_t>(t)].get(), i};
}

Example TaskMixture::get(int64_t index) const {
  const auto [task, i] = origin(index);
  return task->get(i);
}

bool TaskMixture::evaluate(const Example&, const std::string&) const {
  fail("a task mixture does not judge answers: evaluate an example with the task it came from");
}

TaskSequence::TaskSequence(std::vector<TaskPtr> tasks) : tasks_(std::move(tasks)) {
  for (const auto& t : tasks_) {
    NC_CHECK(t != nullptr, "a sequence of a missing task");
    total_ += t->size();
  }
}

Example TaskSequence::get(int64_t index) const {
  check_index(*this, index);
  for (const auto& t : tasks_) {
    if (index < t->size()) return t->get(index);
    index -= t->size();
  }
  NC_CHECK(false, "index past the sequence's tasks");
}

bool TaskSequence::evaluate(const Example&, const std::string&) const {
  fail("a task sequence does not judge answers: evaluate an example with the task it came from");
}

std::string render_mc(const std::string& question, const std::vector<std::string>& letters,
                      const std::vector<std::string>& choices) {
  if (letters.size() != choices.size())
    fail("multiple-choice question with ", choices.size(), " choices but ", letters.size(), " letters: ", question);
  std::string q = "Multiple Choice question: " + question + "\n";
  for (size_t i = 0; i < choices.size(); ++i) q += "- " + choices[i] + "=" + letters[i] + "\n";
  q += "\nRespond only with the letter of the correct answer.";
  return q;
}

}  // namespace nanochat::tasks
