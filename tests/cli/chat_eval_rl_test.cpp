// `nanochat chat-eval` and `nanochat chat-rl` through the binary on a tiny trained checkpoint
// (copied to chatsft_checkpoints/ as a stand-in for a chat-sft one): the printed accuracy is the
// runner's (eval/chat_eval.h) on the same checkpoint and problems, nanochat's `-m scripts.chat_eval
// --` command line works, an unknown task is named, and chat-rl on the offline Arithmetic task
// saves checkpoints that chat-eval -i rl then loads.
#include <gtest/gtest.h>

#include <cstdio>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/model_io.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/engine/engine.h"
#include "nanochat/eval/chat_eval.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tasks/registry.h"
#include "support/cli_util.h"

using namespace nctest;

namespace {

struct EvalDir {
  BaseDir b{"nc_chateval"};
  Result train;
  EvalDir() {
    train = run(b, std::string(kTiny) + " --num-iterations 2");
    fs::create_directories(b.dir + "/chatsft_checkpoints");
    if (train.code == 0) fs::copy(b.ckpt(), b.dir + "/chatsft_checkpoints/t", fs::copy_options::recursive);
  }
};

EvalDir& eval_dir() {
  static EvalDir d;
  return d;
}

// The "<task> accuracy: xx.xx%" line the runner's result gives.
std::string accuracy_line(const std::string& base_dir, const std::string& task, const ChatEvalOptions& o) {
  ::setenv("NANOCHAT_BASE_DIR", base_dir.c_str(), 1);
  InferenceModel im = load_for_inference(CheckpointSource::Sft, "t", -1);
  Engine engine(*im.lm.model, im.tokenizer);
  LocalCommunicator comm;
  const ChatEvalResult r = run_chat_eval(engine, *tasks::open_task(task, "", "test"), o, comm);
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s accuracy: %.2f%%\n", task.c_str(), 100.0 * r.accuracy);
  return buf;
}

TEST(ChatEvalCli, PrintsTheRunnersAccuracyPerTask) {
  EvalDir& d = eval_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  auto c = run(d.b, " chat-eval -i sft -g t -a 'Arithmetic|SpellingBee' -x 3 -m 8 --threads 1");
  ASSERT_EQ(c.code, 0) << c.out;
  ChatEvalOptions o;
  o.max_problems = 3;
  o.max_new_tokens = 8;
  EXPECT_NE(c.out.find(accuracy_line(d.b.dir, "Arithmetic", o)), std::string::npos) << c.out;
  EXPECT_NE(c.out.find(accuracy_line(d.b.dir, "SpellingBee", o)), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("Arithmetic: "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("/3 ("), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("ChatCORE"), std::string::npos) << c.out;  // only with the five tasks
}

// The five tasks of ChatCORE from the readers' fixture files (a few problems each, in the published
// formats): every task's line and the ChatCORE line equal the runner's on the same problems.
TEST(ChatEvalCli, ChatCoreOverTheFiveTasks) {
  EvalDir& d = eval_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  fs::remove_all(d.b.dir + "/task_data");
  fs::copy(std::string(NANOCHAT_TEST_DATA) + "/tasks/task_data", d.b.dir + "/task_data", fs::copy_options::recursive);
  auto c = run(d.b, " chat-eval -i sft -g t -x 3 -m 8 -b 2 --threads 1");
  ASSERT_EQ(c.code, 0) << c.out;
  ChatEvalOptions o;
  o.max_problems = 3;
  o.max_new_tokens = 8;
  o.batch_size = 2;
  std::vector<std::pair<std::string, double>> acc;
  {
    ::setenv("NANOCHAT_BASE_DIR", d.b.dir.c_str(), 1);
    InferenceModel im = load_for_inference(CheckpointSource::Sft, "t", -1);
    Engine engine(*im.lm.model, im.tokenizer);
    LocalCommunicator comm;
    for (const std::string& name : chatcore_task_names()) {
      const ChatEvalResult r = run_chat_eval(engine, *open_chat_eval_task(name), o, comm);
      EXPECT_EQ(r.total, 3) << name;
      acc.emplace_back(name, r.accuracy);
      char line[128];
      std::snprintf(line, sizeof line, "%s accuracy: %.2f%%\n", name.c_str(), 100.0 * r.accuracy);
      EXPECT_NE(c.out.find(line), std::string::npos) << c.out << "\nwant: " << line;
    }
  }
  char line[64];
  std::snprintf(line, sizeof line, "ChatCORE metric: %.4f\n", *chatcore_metric(acc));
  EXPECT_NE(c.out.find(line), std::string::npos) << c.out << "\nwant: " << line;
  fs::remove_all(d.b.dir + "/task_data");
}

TEST(ChatEvalCli, NanochatsCommandLineAndBadTasks) {
  EvalDir& d = eval_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  auto m = run(d.b, " -m scripts.chat_eval -- -i sft -g t -a Arithmetic -x 2 -m 4 --threads 1");
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_NE(m.out.find("Arithmetic accuracy: "), std::string::npos) << m.out;
  auto bad = run(d.b, " chat-eval -i sft -g t -a 'Arithmetic|Nope' -x 1 -m 4 --threads 1");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("Nope"), std::string::npos) << bad.out;
  auto empty = run(d.b, " chat-eval -i sft -g t -a 'Arithmetic||GSM8K' --threads 1");
  EXPECT_EQ(empty.code, 1) << empty.out;
  EXPECT_NE(empty.out.find("has an empty task name"), std::string::npos) << empty.out;
  auto missing = run(d.b, " chat-eval -i sft -g t -a ARC-Easy --threads 1");  // not downloaded here
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_NE(missing.out.find("nanochat data download"), std::string::npos) << missing.out;
}

TEST(ChatRlCli, TrainsOnArithmeticAndSavesWhatChatEvalLoads) {
  EvalDir& d = eval_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  fs::remove_all(d.b.dir + "/chatrl_checkpoints");  // another test's RL run may have left steps
  auto r = run(d.b,
               " chat-rl --model-tag t --task Arithmetic --num-steps 3 --examples-per-step 2 --num-samples 4"
               " --device-batch-size 2 --max-new-tokens 6 --eval-every 2 --eval-examples 2 --save-every 2 --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Calculated number of steps: 3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Step 0 | Pass@1: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Step 2 | Pass@1: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Step 2/3 | Average reward: "), std::string::npos) << r.out;
  const std::string dir = d.b.dir + "/chatrl_checkpoints/t";
  EXPECT_EQ(complete_checkpoint_steps(dir), (std::vector<int64_t>{2}));
  auto e = run(d.b, " chat-eval -i rl -g t -a Arithmetic -x 2 -m 4 --threads 1");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("rl model t step 2"), std::string::npos) << e.out;
  auto m = run(d.b,
               " -m scripts.chat_rl -- --model-tag=t --task=Arithmetic --num-steps=1 --examples-per-step=1"
               " --num-samples=2 --device-batch-size=2 --max-new-tokens=4 --eval-every=0 --threads=1");
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_NE(m.out.find("Step 0/1 | Average reward: "), std::string::npos) << m.out;
}

// Under the launcher with two ranks the problems are shared and the counts summed: the same
// lines as one process. chat-rl's ranks share each step's examples, half each at the first step,
// then by measured speed (rank 1 made 5x slower takes fewer); a rollout's seed depends on the
// step and the example only, so every step's reward is the one process's.
TEST(ChatEvalCli, TwoRanksUnderTheLauncherPrintTheSameAccuracies) {
  EvalDir& d = eval_dir();
  ASSERT_EQ(d.train.code, 0) << d.train.out;
  fs::remove_all(d.b.dir + "/task_data");
  fs::copy(std::string(NANOCHAT_TEST_DATA) + "/tasks/task_data", d.b.dir + "/task_data", fs::copy_options::recursive);
  const std::string eval = " chat-eval -i sft -g t -a 'ARC-Easy|GSM8K|Arithmetic' -x 5 -m 8 -b 2 --threads 1";
  auto one = run(d.b, eval);
  ASSERT_EQ(one.code, 0) << one.out;
  auto two = run(d.b, " run --nproc-per-node 2 --master-port " + std::to_string(free_port()) + eval);
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("2 rank(s)"), std::string::npos) << two.out;
  for (const char* task : {"ARC-Easy", "GSM8K", "Arithmetic"}) {
    const std::string key = std::string(task) + " accuracy: ";
    const size_t a = one.out.find(key), b = two.out.find(key);
    ASSERT_NE(a, std::string::npos) << one.out;
    ASSERT_NE(b, std::string::npos) << two.out;
    EXPECT_EQ(one.out.substr(a, one.out.find('\n', a) - a), two.out.substr(b, two.out.find('\n', b) - b));
  }
  const std::string rl =
      " chat-rl --model-tag t --task Arithmetic --num-steps 5 --examples-per-step 6 --num-samples 2"
      " --device-batch-size 2 --max-new-tokens 4 --eval-every 0 --threads 1";
  auto rl1 = run(d.b, rl);
  ASSERT_EQ(rl1.code, 0) << rl1.out;
  auto rl2 = run(d.b, " run --nproc-per-node 2 --master-port " + std::to_string(free_port()) + rl,
                 "NANOCHAT_TEST_FAULT=slow:1:5");
  ASSERT_EQ(rl2.code, 0) << rl2.out;
  EXPECT_NE(rl2.out.find("Examples per rank: dealt by measured speed each step (the first evenly)\n"),
            std::string::npos)
      << rl2.out;
  EXPECT_NE(rl2.out.find(" | examples per rank: 3/3 | seconds per rank: "), std::string::npos) << rl2.out;  // step 0
  for (int step = 0; step < 5; ++step) {
    const std::string key = "Step " + std::to_string(step) + "/5 | Average reward: ";
    const size_t a = rl1.out.find(key), b = rl2.out.find(key);
    ASSERT_NE(a, std::string::npos) << rl1.out;
    ASSERT_NE(b, std::string::npos) << rl2.out;
    EXPECT_EQ(rl1.out.substr(a, rl1.out.find(" | lrm", a) - a), rl2.out.substr(b, rl2.out.find(" | lrm", b) - b));
  }
  // the last step's split: rank 0 (5x faster) takes at least 4 of the 6
  const size_t last = rl2.out.find("Step 4/5 | ");
  ASSERT_NE(last, std::string::npos) << rl2.out;
  const std::string line = rl2.out.substr(last, rl2.out.find('\n', last) - last);
  const size_t at = line.find("examples per rank: ");
  ASSERT_NE(at, std::string::npos) << line;
  EXPECT_GE(std::stoi(line.substr(at + 19)), 4) << line;
  EXPECT_EQ(complete_checkpoint_steps(d.b.dir + "/chatrl_checkpoints/t").back(), 4);
  fs::remove_all(d.b.dir + "/task_data");
  fs::remove_all(d.b.dir + "/chatrl_checkpoints");
}

}  // namespace
