// JSONL conversation files (tasks/jsonl_task.h): both line forms, blank lines, several files, and
// the errors naming the file and the row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/tasks/jsonl_task.h"

using namespace nanochat;
using namespace nanochat::tasks;
namespace fs = std::filesystem;

namespace {

struct TmpFile {
  std::string path;
  TmpFile(const std::string& name, const std::string& text)
      : path((fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".jsonl")).string()) {
    std::ofstream(path) << text;
  }
  ~TmpFile() { fs::remove(path); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonlTask, ReadsBothFormsSkipsBlankLinesAndKeepsLineNumbers) {
  TmpFile a("nc_jsonl_a",
            R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, )"
            R"({"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "python", "text": "1+1"}]}]})"
            "\n\n   \n"
            R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])"
            "\n");
  JsonlTask t(a.path);
  ASSERT_EQ(t.size(), 2);
  EXPECT_EQ(t.line_of(0), 1);
  EXPECT_EQ(t.line_of(1), 4);
  const Conversation c0 = t.get(0).conversation;
  ASSERT_EQ(c0.messages.size(), 3u);
  EXPECT_EQ(c0.messages[0].role, Message::Role::System);
  ASSERT_EQ(c0.messages[2].parts.size(), 2u);
  EXPECT_EQ(c0.messages[2].parts[1].kind, ContentPart::Kind::Python);
  EXPECT_EQ(t.get(1).conversation.messages[1].text(), "a");
  EXPECT_NE(error_of([&] { t.get(2); }).find("out of range"), std::string::npos);
}

TEST(JsonlTask, SeveralFilesRepeatedOrCommaSeparatedAreOneTaskInOrder) {
  TmpFile a("nc_jsonl_1", R"([{"role": "user", "content": "1"}, {"role": "assistant", "content": "one"}])"
                          "\n");
  TmpFile b("nc_jsonl_2", R"([{"role": "user", "content": "2"}, {"role": "assistant", "content": "two"}])"
                          "\n"
                          R"([{"role": "user", "content": "3"}, {"role": "assistant", "content": "three"}])"
                          "\n");
  const TaskPtr t = jsonl_tasks({a.path + "," + b.path, a.path});
  ASSERT_EQ(t->size(), 4);
  EXPECT_EQ(t->get(0).conversation.messages[1].text(), "one");
  EXPECT_EQ(t->get(2).conversation.messages[1].text(), "three");
  EXPECT_EQ(t->get(3).conversation.messages[1].text(), "one");
  EXPECT_NE(error_of([] { jsonl_tasks({",", ""}); }).find("no JSONL file"), std::string::npos);
}

TEST(JsonlTask, ErrorsNameTheFileAndTheRow) {
  EXPECT_NE(error_of([] { JsonlTask("/nonexistent/convs.jsonl"); }).find("/nonexistent/convs.jsonl"),
            std::string::npos);
  const std::string ok = R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])";
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "row 2: "},
      {R"({"msgs": []})", "row 2: "},
      {R"([{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}])", "row 2: message 0 is from"},
      {R"([{"role": "user", "content": "q"}])", "row 2: a conversation needs"},
      {R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "r"}])",
       "row 2: the last message must be the assistant's"},
      {R"([{"role": "user", "content": 7}, {"role": "assistant", "content": "a"}])", "row 2: "},
  };
  for (const auto& [line, want] : cases) {
    TmpFile f("nc_jsonl_bad", ok + "\n" + line + "\n");
    const std::string e = error_of([&] { JsonlTask t(f.path); });
    EXPECT_NE(e.find(f.path + " " + want), std::string::npos) << line << " -> " << e;
  }
  TmpFile empty("nc_jsonl_empty", "\n\n");
  EXPECT_NE(error_of([&] { JsonlTask t(empty.path); }).find("holds no conversation"), std::string::npos);
}
