// Chat evaluation (eval/chat_eval.h) against nanochat's own run_categorical_eval and
// run_generative_eval (tests/fixtures/chat/chat_eval.json, written by
// tools/chat/make_chat_eval_fixture.py on the engine fixture model tool_int): the same letter chosen
// for every problem, the same completions handed to evaluate(), the same accuracies. Plus the
// rank striding (two ranks as threads give the single-rank counts), ChatCORE's formula, chat_core,
// and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/engine/engine.h"
#include "nanochat/eval/chat_eval.h"
#include "nanochat/model/gpt.h"
#include "support/byte_tokenizer.h"
#include "support/error_of.h"
#include "support/thread_communicator.h"

namespace nanochat {
namespace {

using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;
using nlohmann::json;

// A task in memory, judged as the fixture's Python task judges (categorical: the letter equals the
// reference answer; generative: the reference answer occurs in the completion), recording every
// (problem, completion) evaluate() is asked about.
class MemoryTask final : public tasks::Task {
 public:
  MemoryTask(std::string name, tasks::EvalType type) : name_(std::move(name)), type_(type) {}
  void add(const std::string& question, const std::string& answer, std::vector<std::string> letters = {}) {
    tasks::Example ex;
    ex.conversation.messages = {Message::plain(Message::Role::User, question),
                                Message::plain(Message::Role::Assistant, answer)};
    ex.letters = std::move(letters);
    ex.extra = json{{"index", examples_.size()}};
    examples_.push_back(std::move(ex));
  }
  std::string name() const override { return name_; }
  tasks::EvalType eval_type() const override { return type_; }
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  tasks::Example get(int64_t i) const override { return examples_.at(static_cast<size_t>(i)); }
  bool evaluate(const tasks::Example& ex, const std::string& completion) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.emplace_back(ex.extra.at("index").get<int64_t>(), completion);
    }
    const std::string answer = ex.conversation.messages.back().text();
    return type_ == tasks::EvalType::Categorical ? completion == answer : completion.find(answer) != std::string::npos;
  }
  std::vector<std::pair<int64_t, std::string>> calls() const { return calls_; }

 private:
  std::string name_;
  tasks::EvalType type_;
  std::vector<tasks::Example> examples_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<int64_t, std::string>> calls_;
};

const Tokenizer& byte_tok() { return nctest::byte_tokenizer(); }

const json& fixture() {
  static const json j = [] {
    std::string text;
    const std::string path = std::string(NANOCHAT_TEST_DATA) + "/chat/chat_eval.json";
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
    return json::parse(text);
  }();
  return j;
}

std::unique_ptr<GPT> load_model() {
  const std::string path = std::string(NANOCHAT_TEST_DATA) + "/chat/" + fixture().at("model").get<std::string>();
  StFile f = load_safetensors(path);
  auto m = std::make_unique<GPT>(ModelConfig::from_json(json::parse(f.metadata.at("config"))));
  for (const ParamInfo& p : m->params()) {
    const std::vector<float> w = f.at("param." + p.name).to_f32();
    EXPECT_EQ(w.size(), p.numel) << p.name;
    std::copy(w.begin(), w.end(), m->param(p.name));
  }
  return m;
}

std::shared_ptr<MemoryTask> categorical_task(const std::string& name = "fixture-mc") {
  auto t = std::make_shared<MemoryTask>(name, tasks::EvalType::Categorical);
  for (const auto& p : fixture().at("categorical").at("problems"))
    t->add(p.at("question"), p.at("answer"), p.at("letters").get<std::vector<std::string>>());
  return t;
}

std::shared_ptr<MemoryTask> generative_task(const std::string& name = "fixture-gen") {
  auto t = std::make_shared<MemoryTask>(name, tasks::EvalType::Generative);
  for (const auto& p : fixture().at("generative").at("problems")) t->add(p.at("question"), p.at("needle"));
  return t;
}

ChatEvalOptions categorical_options() {
  ChatEvalOptions o;
  o.batch_size = fixture().at("categorical").at("batch_size");
  o.max_problems = fixture().at("categorical").at("max_problems");
  return o;
}

ChatEvalOptions generative_options() {
  const json& g = fixture().at("generative");
  ChatEvalOptions o;
  o.num_samples = g.at("num_samples");
  o.max_new_tokens = g.at("max_new_tokens");
  o.temperature = g.at("temperature");
  o.top_k = g.at("top_k");
  o.max_problems = g.at("max_problems");
  return o;
}

TEST(ChatEval, CategoricalChoosesNanochatsLetters) {
  auto model = load_model();
  auto task = categorical_task();
  LocalCommunicator comm;
  const ChatEvalResult r = run_categorical_eval(*model, byte_tok(), *task, categorical_options(), comm);
  const json& want = fixture().at("categorical");
  const int64_t n = want.at("max_problems");
  ASSERT_EQ(r.total, n);
  ASSERT_EQ(r.outcomes.size(), static_cast<size_t>(n));
  int distinct_letters = 0;
  std::vector<std::string> seen;
  for (int64_t i = 0; i < n; ++i) {
    const json& p = want.at("problems")[static_cast<size_t>(i)];
    EXPECT_EQ(r.outcomes[static_cast<size_t>(i)].index, i);
    EXPECT_EQ(r.outcomes[static_cast<size_t>(i)].choice, p.at("expected_choice").get<std::string>()) << "problem " << i;
    EXPECT_EQ(r.outcomes[static_cast<size_t>(i)].passed, p.at("expected_choice") == p.at("answer")) << "problem " << i;
    if (std::find(seen.begin(), seen.end(), r.outcomes[static_cast<size_t>(i)].choice) == seen.end()) {
      seen.push_back(r.outcomes[static_cast<size_t>(i)].choice);
      ++distinct_letters;
    }
  }
  EXPECT_GE(distinct_letters, 4);  // the fixture exercises more than one letter position
  EXPECT_DOUBLE_EQ(r.accuracy, want.at("accuracy").get<double>());
  EXPECT_GT(r.passed, 0);
  EXPECT_LT(r.passed, r.total);
  // what evaluate() was asked: once per problem, with the chosen letter
  const auto calls = task->calls();
  ASSERT_EQ(calls.size(), static_cast<size_t>(n));
  for (const auto& [i, letter] : calls)
    EXPECT_EQ(letter, want.at("problems")[static_cast<size_t>(i)].at("expected_choice").get<std::string>());
}

TEST(ChatEval, LogitsAtOnePositionPerRowEqualTheFullLogits) {
  auto model = load_model();
  const int B = 3, T = 7;
  const int64_t V = model->config().vocab_size;
  std::vector<int32_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % V);
  std::vector<float> full(static_cast<size_t>(B * T * V)), at(static_cast<size_t>(B * V));
  model->forward_logits(ids.data(), B, T, full.data());
  const int32_t pos[B] = {6, 0, 3};
  model->forward_logits_at(ids.data(), B, T, pos, at.data());
  for (int b = 0; b < B; ++b)
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(at[b * V + v], full[(b * T + pos[b]) * V + v], 1e-5) << "row " << b << " token " << v;
  const int32_t bad[B] = {6, 7, 0};
  EXPECT_NE(nctest::error_of([&] {
              model->forward_logits_at(ids.data(), B, T, bad, at.data());
            }).find("position 7 of row 1 is outside [0, 7)"),
            std::string::npos);
}

TEST(ChatEval, CategoricalDoesNotDependOnTheBatchSize) {
  auto model = load_model();
  LocalCommunicator comm;
  ChatEvalOptions o = categorical_options();
  o.max_problems = -1;  // every problem
  std::vector<std::string> first;
  for (int b : {1, 4, 14, 32}) {
    o.batch_size = b;
    auto task = categorical_task();
    const ChatEvalResult r = run_categorical_eval(*model, byte_tok(), *task, o, comm);
    ASSERT_EQ(r.total, task->size());
    std::vector<std::string> choices;
    for (const auto& out : r.outcomes) choices.push_back(out.choice);
    if (first.empty())
      first = choices;
    else
      EXPECT_EQ(choices, first) << "batch size " << b;
  }
  // nanochat's letters over every problem, batched by 5
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_EQ(first[i], fixture().at("categorical").at("problems")[i].at("expected_choice_all").get<std::string>())
        << "problem " << i;
}

TEST(ChatEval, GenerativeHandsEvaluateNanochatsCompletions) {
  auto model = load_model();
  Engine engine(*model, byte_tok());
  auto task = generative_task();
  LocalCommunicator comm;
  const ChatEvalResult r = run_generative_eval(engine, *task, generative_options(), comm);
  const json& want = fixture().at("generative");
  const int64_t n = want.at("max_problems");
  ASSERT_EQ(r.total, n);
  EXPECT_DOUBLE_EQ(r.accuracy, want.at("accuracy").get<double>());
  const auto calls = task->calls();
  ASSERT_EQ(calls.size(), static_cast<size_t>(n * want.at("num_samples").get<int64_t>()));
  for (int64_t i = 0; i < n; ++i) {
    const json& p = want.at("problems")[static_cast<size_t>(i)];
    std::vector<std::string> got;
    for (const auto& [j, c] : calls)
      if (j == i) got.push_back(c);
    EXPECT_EQ(got, p.at("expected_completions").get<std::vector<std::string>>()) << "problem " << i;
    int passed = 0;
    for (const auto& c : got) passed += c.find(p.at("needle").get<std::string>()) != std::string::npos;
    EXPECT_EQ(r.outcomes[static_cast<size_t>(i)].samples_passed, passed);
    EXPECT_EQ(r.outcomes[static_cast<size_t>(i)].passed, passed > 0);
  }
}

TEST(ChatEval, TwoRanksSplitTheProblemsAndSumTheCounts) {
  auto model = load_model();
  Engine engine(*model, byte_tok());
  LocalCommunicator solo;
  ChatEvalOptions co = categorical_options();
  co.max_problems = -1;
  co.batch_size = 4;  // 14 problems: batches of 4, 4, 4, 2 -> rank 0 takes 0 and 2, rank 1 takes 1 and 3
  const ChatEvalResult cat1 = run_categorical_eval(*model, byte_tok(), *categorical_task(), co, solo);
  const ChatEvalResult gen1 = run_generative_eval(engine, *generative_task(), generative_options(), solo);
  constexpr int W = 2;
  ThreadHub hub(W);
  std::vector<ChatEvalResult> cat(W), gen(W);
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      ThreadCommunicator comm(hub, r);
      auto m = load_model();
      Engine e(*m, byte_tok());
      cat[r] = run_categorical_eval(*m, byte_tok(), *categorical_task(), co, comm);
      gen[r] = run_generative_eval(e, *generative_task(), generative_options(), comm);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(cat[r].passed, cat1.passed);
    EXPECT_EQ(cat[r].total, cat1.total);
    EXPECT_EQ(gen[r].passed, gen1.passed);
    EXPECT_EQ(gen[r].total, gen1.total);
  }
  std::vector<int64_t> cat_idx0, gen_idx1;
  for (const auto& o : cat[0].outcomes) cat_idx0.push_back(o.index);
  for (const auto& o : gen[1].outcomes) gen_idx1.push_back(o.index);
  EXPECT_EQ(cat_idx0, (std::vector<int64_t>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(gen_idx1, (std::vector<int64_t>{1, 3}));
  for (int r = 0; r < W; ++r)
    for (const auto& o : cat[r].outcomes) EXPECT_EQ(o.choice, cat1.outcomes[static_cast<size_t>(o.index)].choice);
}

TEST(ChatEval, ChatCoreIsTheMeanCenteredAccuracyOverAllResults) {
  std::vector<std::pair<std::string, double>> r = {
      {"ARC-Easy", 0.5}, {"ARC-Challenge", 0.25}, {"MMLU", 1.0}, {"GSM8K", 0.1}, {"HumanEval", 0.0}};
  // (0.5 - 0.25) / 0.75 = 1/3, 0, 1, 0.1, 0
  ASSERT_TRUE(chatcore_metric(r).has_value());
  EXPECT_NEAR(*chatcore_metric(r), (1.0 / 3 + 0 + 1 + 0.1 + 0) / 5, 1e-15);
  r.emplace_back("SpellingBee", 0.5);  // nanochat averages over every evaluated task, baseline 0
  EXPECT_NEAR(*chatcore_metric(r), (1.0 / 3 + 1 + 0.1 + 0.5) / 6, 1e-15);
  r.erase(r.begin() + 3);  // without GSM8K there is no ChatCORE
  EXPECT_FALSE(chatcore_metric(r).has_value());
  EXPECT_EQ(chat_eval_baseline("MMLU"), 0.25);
  EXPECT_EQ(chat_eval_baseline("GSM8K"), 0.0);
  EXPECT_EQ(chatcore_task_names().size(), 5u);
}

TEST(ChatEval, ChatCoreRunsTheFiveTasksWithTheirLimits) {
  auto model = load_model();
  Engine engine(*model, byte_tok());
  LocalCommunicator comm;
  std::vector<std::string> opened;
  std::vector<ChatEvalResult> seen;
  ChatCoreLimits lim;
  lim.max_categorical = 5;
  lim.max_generative = 2;
  lim.batch_size = 2;
  const ChatCoreResult cc = chat_core(
      engine,
      [&](const std::string& name) -> tasks::TaskPtr {
        opened.push_back(name);
        if (chatcore_is_categorical(name)) return categorical_task(name);
        return generative_task(name);
      },
      lim, comm, [&](const ChatEvalResult& r) { seen.push_back(r); });
  EXPECT_EQ(opened, chatcore_task_names());
  ASSERT_EQ(seen.size(), 5u);
  for (const auto& r : seen) EXPECT_EQ(r.total, chatcore_is_categorical(r.task) ? 5 : 2) << r.task;
  ASSERT_EQ(cc.accuracies.size(), 5u);
  EXPECT_NEAR(cc.chatcore, *chatcore_metric(cc.accuracies), 1e-15);
  double cat = 0;
  for (int i = 0; i < 3; ++i) cat += (cc.accuracies[i].second - 0.25) / 0.75;
  EXPECT_NEAR(cc.chatcore_cat, cat / 3, 1e-15);
  // the generative fixture's first two problems: "408" passes, "420" does not
  EXPECT_DOUBLE_EQ(cc.accuracies[3].second, 0.5);
}

TEST(ChatEval, BadInputIsNamed) {
  auto model = load_model();
  Engine engine(*model, byte_tok());
  LocalCommunicator comm;
  auto two_token = std::make_shared<MemoryTask>("two-token", tasks::EvalType::Categorical);
  two_token->add("q", "AB", {"A", "AB"});
  EXPECT_NE(nctest::error_of([&] {
              run_categorical_eval(*model, byte_tok(), *two_token, {}, comm);
            }).find("the answer letter 'AB' encodes to 2 tokens"),
            std::string::npos);
  auto no_letters = std::make_shared<MemoryTask>("bare", tasks::EvalType::Categorical);
  no_letters->add("q", "A");
  EXPECT_NE(nctest::error_of([&] {
              run_categorical_eval(*model, byte_tok(), *no_letters, {}, comm);
            }).find("bare problem 0 has no answer letters"),
            std::string::npos);
  EXPECT_NE(nctest::error_of([&] {
              run_generative_eval(engine, *categorical_task(), {}, comm);
            }).find("is a categorical task"),
            std::string::npos);
  EXPECT_NE(nctest::error_of([&] {
              run_categorical_eval(*model, byte_tok(), *generative_task(), {}, comm);
            }).find("is not a categorical task"),
            std::string::npos);
  ChatEvalOptions o;
  o.batch_size = 0;
  EXPECT_NE(nctest::error_of([&] {
              run_categorical_eval(*model, byte_tok(), *categorical_task(), o, comm);
            }).find("batch size must be >= 1"),
            std::string::npos);
  // an empty task (or max_problems 0) evaluates nothing: accuracy 0, no division by zero
  ChatEvalOptions none;
  none.max_problems = 0;
  const ChatEvalResult r = run_chat_eval(engine, *generative_task(), none, comm);
  EXPECT_EQ(r.total, 0);
  EXPECT_EQ(r.accuracy, 0.0);
}

}  // namespace
}  // namespace nanochat
