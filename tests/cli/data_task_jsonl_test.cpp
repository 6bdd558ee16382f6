// `nanochat data task-jsonl`: a task's examples as the conversation JSON lines chat-sft
// --train-jsonl reads -- GSM8K's fixture examples as nanochat's own tasks code gives them
// (tests/fixtures/tasks/expected.json), and a clear error for a dataset that is not there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/proc_util.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

TEST(DataTaskJsonl, WritesNanochatsConversations) {
  const std::string fixtures = std::string(NANOCHAT_TEST_DATA) + "/tasks";
  const std::string out = (fs::temp_directory_path() / ("nc_tj_" + std::to_string(::getpid()) + ".jsonl")).string();
  auto [code, text] = nctest::shell("NANOCHAT_BASE_DIR=" + fixtures + " timeout 120 " + NANOCHAT_BINARY +
                                    " data task-jsonl GSM8K --split test -o " + out + " 2>&1");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("6 conversation(s) of GSM8K written to " + out), std::string::npos) << text;
  json expected;
  std::ifstream(fixtures + "/expected.json") >> expected;
  const json& want = expected["GSM8K/main/test"]["examples"];
  std::ifstream in(out);
  std::string line;
  size_t i = 0;
  for (; std::getline(in, line); ++i) {
    ASSERT_LT(i, want.size());
    json msgs = want[i]["messages"];
    for (auto& m : msgs) {  // a content of one text part is written as a plain string
      auto& c = m["content"];
      if (c.is_array() && c.size() == 1 && c[0]["type"] == "text") c = c[0]["text"];
    }
    EXPECT_EQ(json::parse(line)["messages"], msgs) << "line " << i;
  }
  EXPECT_EQ(i, want.size());
  fs::remove(out);

  std::tie(code, text) = nctest::shell("NANOCHAT_BASE_DIR=" + fixtures + "/nowhere timeout 120 " + NANOCHAT_BINARY +
                                       " data task-jsonl MMLU --split auxiliary_train -o " + out + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(text.find("task_data/cais--mmlu/all/auxiliary_train/manifest.json: not found"), std::string::npos) << text;
  EXPECT_NE(text.find("nanochat data download --tasks MMLU"), std::string::npos) << text;
}

}  // namespace
