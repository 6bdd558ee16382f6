// Synthetic tasks (tasks/synthetic.h): the same examples on every open, disjoint train and test
// problems, answers that are true (counted here, and the calculator expressions run by python3),
// and evaluate() taking the reference answer and refusing a wrong one.
#include "nanochat/tasks/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "nanochat/core/error.h"
#include "nanochat/tasks/execution.h"
#include "nanochat/tasks/registry.h"

namespace nanochat::tasks {
namespace {

const char* kWords = "/usr/share/dict/words";  // Debian's wamerican (scripts/deps.sh)

std::string user_of(const Example& ex) { return ex.conversation.messages.front().text(); }
std::string answer_of(const Example& ex) { return ex.conversation.messages.back().text(); }

// The quoted word of a SpellingBee prompt (the last '...' in it).
std::string word_of(const std::string& prompt) {
  const size_t e = prompt.rfind('\'');
  const size_t b = prompt.rfind('\'', e - 1);
  return prompt.substr(b + 1, e - b - 1);
}

TEST(Synthetic, DeterministicAndNamed) {
  for (const char* name : {"SpellingBee", "Arithmetic", "Identity"}) {
    const TaskPtr a = open_task(name, "", "train"), b = open_task(name, "", "train");
    EXPECT_EQ(a->name(), name);
    EXPECT_EQ(a->eval_type(), EvalType::Generative);
    ASSERT_EQ(a->size(), b->size());
    for (int64_t i = 0; i < std::min<int64_t>(a->size(), 50); ++i)
      EXPECT_EQ(a->get(i).conversation, b->get(i).conversation);
    EXPECT_THROW(a->get(a->size()), Error);
    EXPECT_THROW(open_task(name, "", "validation"), Error);
  }
}

TEST(Synthetic, SpellingBeeSplitsWordsAndCountsRight) {
  const TaskPtr train = make_spelling_bee("train", kWords), test = make_spelling_bee("test", kWords);
  EXPECT_EQ(train->size(), kSyntheticTrainSize);
  EXPECT_EQ(test->size(), kSyntheticTestSize);
  std::set<std::string> train_words;
  for (int64_t i = 0; i < train->size(); ++i) train_words.insert(word_of(user_of(train->get(i))));
  int counts = 0;
  for (int64_t i = 0; i < test->size(); ++i) {
    const Example ex = test->get(i);
    const std::string w = word_of(user_of(ex));
    EXPECT_EQ(train_words.count(w), 0u) << w << " is in both splits";
    EXPECT_TRUE(test->evaluate(ex, answer_of(ex))) << answer_of(ex);
    const auto& parts = ex.conversation.messages.back().parts;
    if (parts.size() == 1) {  // spelling: "a-b-c\n\n#### a-b-c"
      std::string dashed;
      for (char c : w) {
        if (!dashed.empty()) dashed.push_back('-');
        dashed.push_back(c);
      }
      EXPECT_EQ(final_answer_line(answer_of(ex)), dashed);
      EXPECT_FALSE(test->evaluate(ex, "#### " + dashed + "-x"));
      continue;
    }
    ASSERT_EQ(parts.size(), 4u);
    EXPECT_EQ(parts[1].kind, ContentPart::Kind::Python);
    EXPECT_EQ(parts[2].kind, ContentPart::Kind::PythonOutput);
    const char letter = user_of(ex)[user_of(ex).find('\'') + 1];
    const auto n = std::count(w.begin(), w.end(), letter);
    EXPECT_EQ(parts[2].text, std::to_string(n)) << user_of(ex);
    EXPECT_FALSE(test->evaluate(ex, "#### " + std::to_string(n + 1)));
    if (counts++ < 3) {  // the calculator expression gives the output part
      const auto r = execute_python("print(" + parts[1].text + ")");
      EXPECT_EQ(r.out, parts[2].text + "\n") << parts[1].text;
    }
  }
  EXPECT_GT(counts, 300);
}

TEST(Synthetic, ArithmeticSplitsProblemsAndComputesRight) {
  const TaskPtr train = make_arithmetic("train"), test = make_arithmetic("test");
  std::set<std::string> train_exprs;
  for (int64_t i = 0; i < train->size(); ++i)
    train_exprs.insert(train->get(i).conversation.messages.back().parts[1].text);
  std::string program;
  std::vector<std::string> outputs;
  for (int64_t i = 0; i < 200; ++i) {
    const Example ex = test->get(i);
    const auto& parts = ex.conversation.messages.back().parts;
    ASSERT_EQ(parts.size(), 4u);
    EXPECT_EQ(train_exprs.count(parts[1].text), 0u) << parts[1].text << " is in both splits";
    program += "print(" + parts[1].text + ")\n";
    outputs.push_back(parts[2].text);
    EXPECT_TRUE(test->evaluate(ex, answer_of(ex)));
    EXPECT_FALSE(test->evaluate(ex, "#### 1" + parts[2].text));
  }
  // python3 evaluates the expressions independently
  const auto r = execute_python(program);
  ASSERT_TRUE(r.success) << r.err;
  std::string expect;
  for (const auto& o : outputs) expect += o + "\n";
  EXPECT_EQ(r.out, expect);
}

TEST(Synthetic, IdentityHoldsOutPhrasings) {
  const TaskPtr train = open_task("Identity", "", "train"), test = open_task("Identity", "", "test");
  std::set<std::string> train_q;
  for (int64_t i = 0; i < train->size(); ++i) train_q.insert(user_of(train->get(i)));
  ASSERT_GT(test->size(), 0);
  for (int64_t i = 0; i < test->size(); ++i) {
    const Example ex = test->get(i);
    EXPECT_EQ(train_q.count(user_of(ex)), 0u) << user_of(ex);
    EXPECT_TRUE(test->evaluate(ex, answer_of(ex)));
    EXPECT_FALSE(test->evaluate(ex, "I am a large model."));
  }
}

TEST(Synthetic, MissingWordListNamesThePackage) {
  try {
    make_spelling_bee("train", "/nonexistent/words");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/words: cannot read"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("wamerican"), std::string::npos);
  }
}

}  // namespace
}  // namespace nanochat::tasks
