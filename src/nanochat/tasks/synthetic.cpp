// Synthetic tasks (synthetic.h).
#include "nanochat/tasks/synthetic.h"

#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/np_random.h"
#include "nanochat/tasks/hub_tasks.h"

namespace nanochat::tasks {

namespace {

using Kind = ContentPart::Kind;
using Role = Message::Role;

bool is_test_split(const std::string& task, const std::string& split) {
  if (split != "train" && split != "test") fail("task ", task, ": split \"", split, "\" is not one of train, test");
  return split == "test";
}

void check_index(const Task& t, int64_t i) {
  if (i < 0 || i >= t.size())
    fail("task ", t.name(), ": example ", i, " is out of range (the task has ", t.size(), " examples)");
}

// A small deterministic generator per example: splitmix64 of (seed, index, stream).
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
struct Draw {
  uint64_t s;
  uint64_t next() { return s = mix64(s); }
  uint64_t below(uint64_t n) { return next() % n; }
};

Example conversation(std::string user, std::vector<ContentPart> assistant) {
  Example ex;
  ex.conversation.messages.push_back(Message::plain(Role::User, std::move(user)));
  Message a;
  a.role = Role::Assistant;
  a.parts = std::move(assistant);
  ex.conversation.messages.push_back(std::move(a));
  return ex;
}

bool numeric_answer_matches(const Example& ex, const std::string& completion) {
  if (ex.conversation.messages.empty()) return false;
  const auto ref = gsm8k_extract_answer(ex.conversation.messages.back().text());
  const auto got = gsm8k_extract_answer(completion);
  return ref.has_value() && ref == got;
}

class SpellingBee final : public Task {
 public:
  SpellingBee(std::vector<std::string> words, uint64_t seed, int64_t size)
      : words_(std::move(words)), seed_(seed), size_(size) {}
  std::string name() const override { return "SpellingBee"; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return size_; }
  Example get(int64_t i) const override {
    check_index(*this, i);
    Draw d{seed_ * 0x100000001b3ull + static_cast<uint64_t>(i)};
    const std::string& w = words_[d.below(words_.size())];
    std::string dashed, commas;
    for (char c : w) {
      if (!dashed.empty()) {
        dashed.push_back('-');
        commas.push_back(',');
      }
      dashed.push_back(c);
      commas.push_back(c);
    }
    if (i % 2 == 0) {
      static const char* asks[] = {"Spell the word '%'.", "How do you spell '%'?", "Spell '%' letter by letter."};
      std::string q = asks[d.below(3)];
      q.replace(q.find('%'), 1, w);
      Example ex = conversation(q, {{Kind::Text, dashed + "\n\n#### " + dashed}});
      ex.extra = {{"kind", "spell"}};
      return ex;
    }
    const char letter = d.below(10) < 7 ? w[d.below(w.size())] : static_cast<char>('a' + d.below(26));
    int count = 0;
    for (char c : w) count += c == letter;
    const std::string l(1, letter), n = std::to_string(count);
    static const char* asks[] = {"How many '%' are in '@'?", "How many times does the letter '%' appear in '@'?",
                                 "Count the letter '%' in the word '@'."};
    std::string q = asks[d.below(3)];
    q.replace(q.find('%'), 1, l);
    q.replace(q.find('@'), 1, w);
    Example ex = conversation(
        q, {{Kind::Text, "Spelled out: " + commas + "\n\nLet me count with Python: "},
            {Kind::Python, "'" + w + "'.count('" + l + "')"},
            {Kind::PythonOutput, n},
            {Kind::Text, "\n\nThe letter '" + l + "' appears " + n + " times in '" + w + "'.\n\n#### " + n}});
    ex.extra = {{"kind", "count"}};
    return ex;
  }
  bool evaluate(const Example& ex, const std::string& completion) const override {
    if (ex.extra.is_object() && ex.extra.value("kind", "") == "spell") {
      const std::string ref = final_answer_line(ex.conversation.messages.back().text());
      return !ref.empty() && final_answer_line(completion) == ref;
    }
    return numeric_answer_matches(ex, completion);
  }

 private:
  std::vector<std::string> words_;
  uint64_t seed_;
  int64_t size_;
};

class Arithmetic final : public Task {
 public:
  Arithmetic(bool test, uint64_t seed, int64_t size) : test_(test), seed_(seed), size_(size) {}
  std::string name() const override { return "Arithmetic"; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return size_; }
  Example get(int64_t i) const override {
    check_index(*this, i);
    Draw d{(seed_ * 0x100000001b3ull + static_cast<uint64_t>(i)) ^ (test_ ? 0x5bd1e995ull : 0)};
    for (;;) {
      const int op = static_cast<int>(d.below(3));
      const int64_t hi = op == 2 ? 98 : 1000, lo = op == 2 ? 2 : 0;
      const int64_t a = lo + static_cast<int64_t>(d.below(static_cast<uint64_t>(hi))),
                    b = lo + static_cast<int64_t>(d.below(static_cast<uint64_t>(hi)));
      // The split a problem belongs to: 1 triple in 10 is test.
      const bool is_test = mix64(static_cast<uint64_t>(a) * 7919 + static_cast<uint64_t>(b) * 104729 + op) % 10 == 0;
      if (is_test != test_) continue;
      const char* sym = op == 0 ? "+" : op == 1 ? "-" : "*";
      const int64_t r = op == 0 ? a + b : op == 1 ? a - b : a * b;
      const std::string expr = std::to_string(a) + " " + sym + " " + std::to_string(b), rs = std::to_string(r);
      static const char* asks[] = {"What is %?", "Compute %.", "Calculate % please."};
      std::string q = asks[d.below(3)];
      q.replace(q.find('%'), 1, expr);
      return conversation(q, {{Kind::Text, "Let me compute it: "},
                              {Kind::Python, expr},
                              {Kind::PythonOutput, rs},
                              {Kind::Text, "\n\n" + expr + " = " + rs + ".\n\n#### " + rs}});
    }
  }
  bool evaluate(const Example& ex, const std::string& completion) const override {
    return numeric_answer_matches(ex, completion);
  }

 private:
  bool test_;
  uint64_t seed_;
  int64_t size_;
};

struct IdentityQa {
  std::vector<const char*> train, test;
  const char* answer;
};
const std::vector<IdentityQa>& identity_qas() {
  static const std::vector<IdentityQa> qas = {
      {{"Who are you?", "What are you?", "Introduce yourself."},
       {"Tell me who you are."},
       "I am nanochat, a small language model. I was trained on CPUs with nanochat.cpp."},
      {{"What is your name?", "What should I call you?", "Do you have a name?"},
       {"What's your name?"},
       "My name is nanochat."},
      {{"Who made you?", "Who trained you?", "Who built you?"},
       {"Who created you?"},
       "I am nanochat: I was trained with nanochat.cpp, a C++ engine that follows Andrej Karpathy's nanochat."},
      {{"Are you ChatGPT?", "Are you GPT-4?", "Are you Claude?"},
       {"Are you Gemini?"},
       "No, I am nanochat, a much smaller model trained with nanochat.cpp."},
      {{"Hi!", "Hello", "Hey there"}, {"Good morning!"}, "Hello! I am nanochat. How can I help you today?"},
  };
  return qas;
}

class Identity final : public Task {
 public:
  Identity(bool test, int64_t size) : test_(test), size_(size) {
    for (size_t q = 0; q < identity_qas().size(); ++q) {
      const auto& qa = identity_qas()[q];
      for (const char* p : test ? qa.test : qa.train) pairs_.emplace_back(q, p);
    }
  }
  std::string name() const override { return "Identity"; }
  EvalType eval_type() const override { return EvalType::Generative; }
  int64_t size() const override { return size_; }
  Example get(int64_t i) const override {
    check_index(*this, i);
    const auto& [q, prompt] = pairs_[static_cast<size_t>(i) % pairs_.size()];
    return conversation(prompt, {{Kind::Text, identity_qas()[q].answer}});
  }
  bool evaluate(const Example&, const std::string& completion) const override {
    return completion.find("nanochat") != std::string::npos;
  }
  int64_t phrasings() const { return static_cast<int64_t>(pairs_.size()); }

 private:
  bool test_;
  int64_t size_;
  std::vector<std::pair<size_t, const char*>> pairs_;
};

}  // namespace

std::string final_answer_line(const std::string& text) {
  const size_t p = text.find("#### ");
  if (p == std::string::npos) return "";
  size_t e = text.find('\n', p + 5);
  if (e == std::string::npos) e = text.size();
  size_t b = p + 5;
  while (b < e && (text[b] == ' ' || text[b] == '\t')) ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r')) --e;
  return text.substr(b, e - b);
}

TaskPtr make_spelling_bee(const std::string& split, const std::string& words_path, uint64_t seed, int64_t size) {
  const bool test = is_test_split("SpellingBee", split);
  std::ifstream in(words_path);
  if (!in)
    fail(words_path, ": cannot read the word list SpellingBee is made from (Debian/Ubuntu: apt-get install wamerican)");
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 3 || line.size() > 12) continue;
    bool ok = true;
    for (char c : line) ok &= c >= 'a' && c <= 'z';
    if (ok) all.push_back(line);
  }
  if (all.size() < 100)
    fail(words_path, ": holds ", all.size(), " usable words (3..12 letters a-z), SpellingBee needs at least 100");
  const auto perm = NpRandom(seed).permutation(static_cast<int64_t>(all.size()));
  std::vector<std::string> words;
  for (size_t k = 0; k < perm.size(); ++k)
    if ((k % 10 == 0) == test) words.push_back(all[static_cast<size_t>(perm[k])]);
  if (size < 0) size = test ? kSyntheticTestSize : kSyntheticTrainSize;
  return std::make_shared<SpellingBee>(std::move(words), seed * 2 + (test ? 1 : 0), size);
}

TaskPtr make_arithmetic(const std::string& split, uint64_t seed, int64_t size) {
  const bool test = is_test_split("Arithmetic", split);
  if (size < 0) size = test ? kSyntheticTestSize : kSyntheticTrainSize;
  return std::make_shared<Arithmetic>(test, seed, size);
}

TaskPtr make_identity(const std::string& split, int64_t size) {
  const bool test = is_test_split("Identity", split);
  auto probe = Identity(test, 0);
  if (size < 0) size = test ? probe.phrasings() : 100;
  return std::make_shared<Identity>(test, size);
}

}  // namespace nanochat::tasks
