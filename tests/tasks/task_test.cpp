// Task views and mixtures (tasks/task.h) against what nanochat's tasks/common.py gives.
#include "nanochat/tasks/task.h"

#include <gtest/gtest.h>

#include "nanochat/core/error.h"

namespace nanochat::tasks {
namespace {

// A task whose example i is a user message "<tag> i" and an assistant answer "<i>".
class Numbers final : public Task {
 public:
  Numbers(std::string tag, int64_t n) : tag_(std::move(tag)), n_(n) {}
  std::string name() const override { return tag_; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    if (i < 0 || i >= n_) fail("out of range");
    Example ex;
    ex.conversation.messages = {Message::plain(Message::Role::User, tag_ + " " + std::to_string(i)),
                                Message::plain(Message::Role::Assistant, std::to_string(i))};
    return ex;
  }
  bool evaluate(const Example& ex, const std::string& c) const override {
    return ex.conversation.messages.back().text() == c;
  }

 private:
  std::string tag_;
  int64_t n_;
};

std::string prompt_of(const Example& ex) { return ex.conversation.messages.front().text(); }

TEST(TaskMixture, OrderIsPythonsRandom42Shuffle) {
  // Python: idx = [(t, i) for t, n in enumerate([3, 5, 2]) for i in range(n)];
  // random.Random(42).shuffle(idx) -> the list below (nanochat's TaskMixture index_map).
  const std::vector<std::pair<int, int>> expected = {{1, 4}, {1, 0}, {0, 2}, {2, 0}, {1, 2},
                                                     {1, 3}, {2, 1}, {1, 1}, {0, 0}, {0, 1}};
  const char* tags[] = {"a", "b", "c"};
  TaskMixture mix(
      {std::make_shared<Numbers>("a", 3), std::make_shared<Numbers>("b", 5), std::make_shared<Numbers>("c", 2)});
  ASSERT_EQ(mix.size(), 10);
  for (size_t k = 0; k < expected.size(); ++k) {
    const auto [t, i] = expected[k];
    EXPECT_EQ(prompt_of(mix.get(static_cast<int64_t>(k))), std::string(tags[t]) + " " + std::to_string(i)) << k;
    EXPECT_EQ(mix.origin(static_cast<int64_t>(k)).second, i);
  }
  EXPECT_THROW(mix.get(10), Error);
  EXPECT_THROW(mix.evaluate(mix.get(0), "4"), Error);
}

TEST(TaskSlice, StartStopStepLikeNanochat) {
  auto base = std::make_shared<Numbers>("n", 10);
  TaskSlice s(base, 2, 9, 3);  // 2, 5, 8
  ASSERT_EQ(s.size(), 3);
  EXPECT_EQ(prompt_of(s.get(0)), "n 2");
  EXPECT_EQ(prompt_of(s.get(2)), "n 8");
  EXPECT_THROW(s.get(3), Error);
  EXPECT_EQ(TaskSlice(base, 0, 5).size(), 5);
  EXPECT_EQ(TaskSlice(base, 4).size(), 6);
  EXPECT_EQ(TaskSlice(base, 5, 5).size(), 0);
  EXPECT_THROW(TaskSlice(base, 5, 4), Error);
  EXPECT_THROW(TaskSlice(base, 0, 11), Error);
  EXPECT_THROW(TaskSlice(base, 0, 5, 0), Error);
  EXPECT_TRUE(s.evaluate(s.get(1), "5"));
}

TEST(TaskSequence, ConcatenatesInOrder) {
  TaskSequence seq(
      {std::make_shared<Numbers>("a", 2), std::make_shared<Numbers>("b", 0), std::make_shared<Numbers>("c", 3)});
  ASSERT_EQ(seq.size(), 5);
  EXPECT_EQ(prompt_of(seq.get(1)), "a 1");
  EXPECT_EQ(prompt_of(seq.get(2)), "c 0");
  EXPECT_EQ(prompt_of(seq.get(4)), "c 2");
  EXPECT_THROW(seq.get(5), Error);
}

TEST(RenderMc, NanochatsMultipleChoicePrompt) {
  // tasks/common.py render_mc("What is 2+2?", ["A", "B"], ["3", "4"])
  EXPECT_EQ(render_mc("What is 2+2?", {"A", "B"}, {"3", "4"}),
            "Multiple Choice question: What is 2+2?\n- 3=A\n- 4=B\n\n"
            "Respond only with the letter of the correct answer.");
  EXPECT_THROW(render_mc("q", {"A"}, {"x", "y"}), Error);
}

}  // namespace
}  // namespace nanochat::tasks
