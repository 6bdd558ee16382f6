// The hub tasks against nanochat's own tasks code on the same files: every example of every
// fixture dataset (in nanochat's order: HubDataset.shuffle(42)) and nanochat's verdicts on a set
// of completions; nanochat's GSM8K and HumanEval helpers on tricky strings; the errors for a
// missing dataset, an unknown name and malformed rows. The fixtures and expected.json are written
// by tools/tasks/make_task_fixtures.py (pyarrow for the files, nanochat's tasks/*.py for the rest).
// With NANOCHAT_TASK_DATA=<dir> the examples and verdicts tests read <dir> instead: real datasets
// and nanochat's results on them, written by tools/tasks/check_real_tasks.py (the cases absent
// there are skipped; the tests of the fixture's special files run on the fixture as always).
#include "nanochat/tasks/registry.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/tasks/hub_tasks.h"

namespace nanochat::tasks {
namespace {

using nlohmann::json;

const std::string kDir = std::string(NANOCHAT_TEST_DATA) + "/tasks";

// The folder of the examples and verdicts tests: NANOCHAT_TASK_DATA, or the fixture.
std::string data_dir() {
  const char* env = std::getenv("NANOCHAT_TASK_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : kDir;
}
bool real_data() { return data_dir() != kDir; }

const json& expected_in(const std::string& dir) {
  static std::map<std::string, json> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) {
    std::ifstream f(dir + "/expected.json");
    if (!f) throw std::runtime_error(dir + "/expected.json: not found");
    std::stringstream ss;
    ss << f.rdbuf();
    it = cache.emplace(dir, json::parse(ss.str())).first;
  }
  return it->second;
}
const json& expected() { return expected_in(kDir); }
const json& data_expected() { return expected_in(data_dir()); }

TaskOptions fixture() {
  TaskOptions o;
  o.base_dir = kDir;
  return o;
}
TaskOptions data() {
  TaskOptions o;
  o.base_dir = data_dir();
  return o;
}

// nanochat's messages with a content of one text part written as a plain string (our JSON form).
json normalize(json messages) {
  for (auto& m : messages) {
    auto& c = m["content"];
    if (c.is_array() && c.size() == 1 && c[0]["type"] == "text") c = c[0]["text"];
  }
  return messages;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Case {
  const char* key;  // "<name>/<subset>/<split>" in expected.json
  const char* name;
  const char* subset;
  const char* split;
};

// the fixture has the first 8; real data may have any
const Case kCases[] = {
    {"SmolTalk/default/train", "SmolTalk", "", "train"},
    {"SmolTalk/default/test", "SmolTalk", "default", "test"},
    {"MMLU/all/test", "MMLU", "", ""},
    {"MMLU/all/auxiliary_train", "MMLU", "all", "auxiliary_train"},
    {"ARC-Easy/ARC-Easy/test", "ARC-Easy", "", "test"},
    {"ARC-Challenge/ARC-Challenge/test", "ARC-Challenge", "ARC-Challenge", ""},
    {"GSM8K/main/test", "GSM8K", "main", "test"},
    {"HumanEval/openai_humaneval/test", "HumanEval", "", ""},
    {"GSM8K/main/train", "GSM8K", "main", "train"},
    {"GSM8K/socratic/test", "GSM8K", "socratic", "test"},
    {"GSM8K/socratic/train", "GSM8K", "socratic", "train"},
};
constexpr size_t kFixtureCases = 8;

// The cases of the data folder: the fixture must have its 8; real data has what was written.
std::vector<Case> present_cases() {
  std::vector<Case> out;
  for (size_t i = 0; i < std::size(kCases); ++i) {
    if (data_expected().contains(kCases[i].key)) {
      out.push_back(kCases[i]);
    } else if (!real_data() && i < kFixtureCases) {
      ADD_FAILURE() << kCases[i].key << " is missing from " << kDir << "/expected.json";
    }
  }
  if (real_data() && out.empty()) ADD_FAILURE() << data_dir() << "/expected.json has none of the known datasets";
  return out;
}

TEST(HubTasks, ExamplesMatchNanochat) {
  for (const Case& c : present_cases()) {
    SCOPED_TRACE(c.key);
    const TaskPtr t = open_task(c.name, c.subset, c.split, data());
    const json& want = data_expected().at(c.key).at("examples");
    ASSERT_EQ(t->size(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(t->name(), c.name);
    const bool categorical = std::string(c.name) == "MMLU" || std::string(c.name).rfind("ARC", 0) == 0;
    EXPECT_EQ(t->eval_type(), categorical ? EvalType::Categorical : EvalType::Generative);
    for (size_t i = 0; i < want.size(); ++i) {
      const Example ex = t->get(static_cast<int64_t>(i));
      EXPECT_EQ(conversation_to_json(ex.conversation)["messages"], normalize(want[i]["messages"])) << "example " << i;
      if (want[i].contains("letters")) {
        EXPECT_EQ(json(ex.letters), want[i]["letters"]) << "example " << i;
      } else {
        EXPECT_TRUE(ex.letters.empty());
      }
      for (const char* key : {"subject", "entry_point", "test"}) {
        if (want[i].contains(key)) {
          EXPECT_EQ(ex.extra.at(key), want[i][key]) << key << " of example " << i;
        }
      }
    }
    EXPECT_THROW(t->get(t->size()), Error);
  }
}

TEST(HubTasks, CategoricalVerdictsMatchNanochat) {
  for (const Case& c : present_cases()) {
    const json& e = data_expected().at(c.key);
    if (!e.contains("verdicts") || e.contains("completions")) continue;
    SCOPED_TRACE(c.key);
    const TaskPtr t = open_task(c.name, c.subset, c.split, data());
    for (size_t i = 0; i < e["verdicts"].size(); ++i) {
      const Example ex = t->get(static_cast<int64_t>(i));
      int right = 0;
      for (const auto& [letter, ok] : e["verdicts"][i].items()) {
        EXPECT_EQ(t->evaluate(ex, letter), ok.get<bool>()) << "example " << i << " letter " << letter;
        right += ok.get<bool>();
      }
      EXPECT_EQ(right, 1);
      EXPECT_FALSE(t->evaluate(ex, "Z"));  // not a letter: wrong (nanochat asserts)
      EXPECT_FALSE(t->evaluate(ex, ""));
    }
  }
}

TEST(HubTasks, Gsm8kVerdictsAndRewardsMatchNanochat) {
  int checked = 0;
  for (const Case& c : present_cases()) {
    if (std::string(c.name) != "GSM8K") continue;
    SCOPED_TRACE(c.key);
    const json& e = data_expected().at(c.key);
    const TaskPtr t = open_task("GSM8K", c.subset, c.split, data());
    const auto completions = e["completions"].get<std::vector<std::string>>();
    for (size_t i = 0; i < e["verdicts"].size(); ++i) {
      const Example ex = t->get(static_cast<int64_t>(i));
      for (size_t k = 0; k < completions.size(); ++k) {
        EXPECT_EQ(t->evaluate(ex, completions[k]), e["verdicts"][i][k].get<int>() == 1) << i << ": " << completions[k];
        EXPECT_EQ(t->reward(ex, completions[k]), e["rewards"][i][k].get<double>()) << i << ": " << completions[k];
      }
    }
    ++checked;
  }
  if (checked == 0 && real_data()) GTEST_SKIP() << "no GSM8K in " << data_dir();
  EXPECT_GT(checked, 0);
}

TEST(HubTasks, HumanEvalVerdictsMatchNanochat) {
  if (real_data() && !data_expected().contains("HumanEval/openai_humaneval/test"))
    GTEST_SKIP() << "no HumanEval in " << data_dir();
  const json& e = data_expected().at("HumanEval/openai_humaneval/test");
  const TaskPtr t = open_task("HumanEval", "", "", data());
  for (size_t i = 0; i < e["verdicts"].size(); ++i) {
    const Example ex = t->get(static_cast<int64_t>(i));
    for (size_t k = 0; k < e["completions"][i].size(); ++k) {
      const auto completion = e["completions"][i][k].get<std::string>();
      EXPECT_EQ(t->evaluate(ex, completion), e["verdicts"][i][k].get<bool>()) << i << ": " << completion;
    }
  }
}

TEST(HubTasks, HelpersMatchNanochat) {
  const json& h = expected().at("helpers");
  for (const auto& [in, out] : h["gsm8k_extract_answer"].items()) {
    const auto got = gsm8k_extract_answer(in);
    if (out.is_null()) {
      EXPECT_FALSE(got.has_value()) << in;
    } else {
      EXPECT_EQ(got.value_or("(none)"), out.get<std::string>()) << in;
    }
  }
  for (const auto& [in, out] : h["humaneval_program"].items()) EXPECT_EQ(humaneval_program(in), out) << in;
  for (const auto& [in, out] : h["humaneval_imports"].items()) EXPECT_EQ(humaneval_imports(in), out) << in;
}

TEST(HubTasks, SliceLikeNanochatTaskView) {
  const TaskPtr all = open_task("MMLU", "all", "test", fixture());
  TaskOptions o = fixture();
  o.start = 2;
  o.stop = 9;
  o.step = 3;  // 2, 5, 8
  const TaskPtr s = open_task("MMLU", "all", "test", o);
  ASSERT_EQ(s->size(), 3);
  EXPECT_EQ(s->get(1).conversation, all->get(5).conversation);
}

TEST(HubTasks, EpochsShareOneTable) {
  const TaskPtr a = open_task("MMLU", "all", "auxiliary_train", fixture());
  const TaskPtr b = open_task("MMLU", "all", "auxiliary_train", fixture());
  TaskMixture mix({a, b, open_task("GSM8K", "", "", fixture())});
  EXPECT_EQ(mix.size(), 2 * a->size() + 6);
  for (int64_t i = 0; i < a->size(); ++i) EXPECT_EQ(a->get(i).conversation, b->get(i).conversation);
  const std::string dir = kDir + "/task_data/cais--mmlu/all/test";
  auto t1 = load_hub_table(dir, {"question"}, "x");
  auto t2 = load_hub_table(dir, {"question"}, "x");
  EXPECT_EQ(t1.get(), t2.get());
  EXPECT_NE(load_hub_table(dir, {"question", "answer"}, "x").get(), t1.get());
}

TEST(HubTasks, MissingDatasetNamesTheManifestAndTheCommand) {
  TaskOptions o;
  o.base_dir = kDir + "/nowhere";
  const std::string m = error_of([&] { open_task("GSM8K", "socratic", "train", o); });
  EXPECT_NE(m.find(kDir + "/nowhere/task_data/openai--gsm8k/socratic/train/manifest.json: not found"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("`nanochat data download --tasks GSM8K/socratic/train`"), std::string::npos) << m;
  const std::string d = error_of([&] { open_task("GSM8K", "", "", o); });
  EXPECT_NE(d.find("`nanochat data download --tasks GSM8K`"), std::string::npos) << d;
}

TEST(HubTasks, UnknownNamesListTheKnownOnes) {
  std::string m = error_of([] { open_task("MMLU-Pro"); });
  EXPECT_NE(m.find("SmolTalk, MMLU, GSM8K, ARC-Easy, ARC-Challenge, HumanEval, SpellingBee, Arithmetic, Identity"),
            std::string::npos)
      << m;
  m = error_of([] { open_task("GSM8K", "main", "validation"); });
  EXPECT_NE(m.find("split \"validation\" is not one of test, train"), std::string::npos) << m;
  m = error_of([] { open_task("MMLU", "abstract_algebra"); });
  EXPECT_NE(m.find("subset \"abstract_algebra\" is not one of all"), std::string::npos) << m;
}

TEST(HubTasks, MalformedRowsNameTheFileAndRow) {
  TaskOptions o;
  o.base_dir = kDir + "/bad";
  const TaskPtr smol = open_task("SmolTalk", "", "train", o);
  // Row 2 of the file has two user messages in a row; find where nanochat's order puts it.
  int bad = 0;
  for (int64_t i = 0; i < smol->size(); ++i) {
    const std::string m = error_of([&] { smol->get(i); });
    if (m == "(no error)") continue;
    bad++;
    EXPECT_NE(m.find("smol-smoltalk/default/train/00000.parquet: row 2: message 1 has role \"user\" but should be "
                     "\"assistant\""),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(bad, 1);
  const TaskPtr arc = open_task("ARC-Easy", "", "", o);
  bad = 0;
  for (int64_t i = 0; i < arc->size(); ++i) {
    const std::string m = error_of([&] { arc->get(i); });
    if (m == "(no error)") continue;
    bad++;
    EXPECT_NE(m.find("ARC-Easy/test/00000.parquet: row 1: answerKey \"Z\" is not one of the choices' labels"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(bad, 1);
}

TEST(HubTasks, SourcesForDownload) {
  const auto arc = hub_sources("ARC-Challenge");
  ASSERT_EQ(arc.size(), 3u);
  EXPECT_EQ(arc[0].repo, "allenai/ai2_arc");
  EXPECT_EQ(arc[0].subset, "ARC-Challenge");
  EXPECT_EQ(hub_dataset_dir(arc[0], "/b"), "/b/task_data/allenai--ai2_arc/ARC-Challenge/test");
  EXPECT_NE(error_of([] { hub_sources("SpellingBee"); }).find("needs no download"), std::string::npos);
}

}  // namespace
}  // namespace nanochat::tasks
