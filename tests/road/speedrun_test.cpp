// `nanochat speedrun` through the binary, on a small corpus and a depth-2 model (the tiny preset
// with smaller flags given the way a user gives them, --<command>.<flag>): the whole road offline
// to a report card whose numbers are the ones the stages printed, a rerun that skips every
// stage, a speedrun killed inside base-train and inside chat-sft that the same command continues
// from their checkpoints, and the plan of a time budget against the time the road then took.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/core/error.h"
#include "support/cli_util.h"
#include "support/proc_util.h"

using namespace nctest;
namespace fs = std::filesystem;

namespace {

// The tiny preset made smaller: depth 2, rows of 64 tokens, 12 steps, short evaluations.
std::string small_road(const std::string& tag) {
  return " speedrun --offline --replace-tokenizer --model-tag " + tag +
         " --tok-train.vocab-size 512 --tok-train.max-chars 2000000"
         " --base-train.depth 2 --base-train.aspect-ratio 32 --base-train.head-dim 32 --base-train.max-seq-len 64"
         " --base-train.device-batch-size 4 --base-train.total-batch-size 512 --base-train.num-iterations 12"
         " --base-train.eval-every 6 --base-train.save-every 6 --base-train.eval-tokens 2048 --base-train.threads 1"
         " --base-eval.split-tokens 1024"
         " --chat-sft.num-iterations 9 --chat-sft.eval-every 4 --chat-sft.save-every 4 --chat-sft.eval-tokens 1024"
         " --chat-sft.threads 1 --chat-eval.max-problems 4 --chat-eval.max-new-tokens 16 --chat-eval.threads 1"
         " --chat-rl.max-new-tokens 16 --chat-rl.eval-examples 4";
}

// The first match of `re` in `text` (group 1..), or {} when none.
std::vector<std::string> find(const std::string& text, const std::string& re, bool last = false) {
  std::vector<std::string> out;
  const std::regex r(re);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), r); it != std::sregex_iterator(); ++it) {
    out.clear();
    for (size_t g = 1; g < it->size(); ++g) out.push_back((*it)[g]);
    if (!last) break;
  }
  return out;
}

// The cells of the card's table row that starts with `| <first> |`.
std::vector<std::string> card_row(const std::string& card, const std::string& first) {
  const size_t at = card.find("| " + first + " |");
  if (at == std::string::npos) return {};
  const std::string line = card.substr(at, card.find('\n', at) - at);
  std::vector<std::string> cells;
  size_t p = 1;
  for (size_t bar; (bar = line.find('|', p)) != std::string::npos; p = bar + 1) {
    std::string c = line.substr(p, bar - p);
    while (!c.empty() && c.front() == ' ') c.erase(c.begin());
    while (!c.empty() && c.back() == ' ') c.pop_back();
    cells.push_back(c);
  }
  return cells;
}

Result run_in(const BaseDir& b, const std::string& args) {
  auto [code, out] = shell("cd " + b.dir + " && NANOCHAT_BASE_DIR=" + b.dir + " timeout 600 " + NANOCHAT_BINARY + args);
  return {code, out};
}

}  // namespace

TEST(Speedrun, TinyOfflineRoadWritesACardOfThePrintedNumbersAndARerunSkipsEveryStage) {
  BaseDir b("nc_speedrun_road");
  // the folder's tokenizer (the models trained with it need it) is replaced only when asked; a plan
  // alone changes nothing and only notes it
  const Result refused = run_in(b, " speedrun --offline");
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_NE(refused.out.find("holds a tokenizer this road did not make"), std::string::npos) << refused.out;
  EXPECT_EQ(refused.out.find("[1/"), std::string::npos) << "a stage ran:\n" << refused.out;
  const Result plan = run_in(b, " speedrun --offline --plan-only");
  EXPECT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find("speedrun: NOTE: " + b.dir + "/tokenizer holds a tokenizer this road did not make"),
            std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("finish"), std::string::npos) << plan.out;
  const Result r = run_in(b, small_road("sr"));
  EXPECT_NE(r.out.find("the one in " + b.dir + "/tokenizer is kept in " + b.dir + "/tokenizer.before-"),
            std::string::npos)
      << r.out;
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* stage : {"data", "tok-train", "tok-eval", "base-train", "base-eval", "sft-data", "chat-sft",
                            "chat-eval-sft", "chat-rl", "chat-eval-rl"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex(std::string("\\] ") + stage + " done in "))) << stage << "\n"
                                                                                                 << r.out;
  const std::string card = slurp(b.dir + "/report/report.md");
  ASSERT_FALSE(card.empty()) << r.out;
  EXPECT_EQ(slurp(b.dir + "/report.md"), card) << "the copy in the working folder";

  // training stages: the run summary each printed
  const auto base = find(r.out, R"(Run summary: ([\d,]+) steps, ([\d,]+) tokens, ([\d,]+) tok/s and MFU ([\d.]+)%)");
  const auto sft =
      find(r.out, R"(Run summary: ([\d,]+) steps, ([\d,]+) tokens, ([\d,]+) tok/s and MFU ([\d.]+)%)", true);
  ASSERT_EQ(base.size(), 4u) << r.out;
  EXPECT_EQ(base[0], "12");
  auto row = card_row(card, "Base model training");
  ASSERT_EQ(row.size(), 7u) << card;
  EXPECT_EQ(row[3], base[1]);
  EXPECT_EQ(row[4], base[2]);
  EXPECT_EQ(row[5], base[3] + "%");
  row = card_row(card, "Chat SFT");
  ASSERT_EQ(row.size(), 7u) << card;
  EXPECT_EQ(row[3], sft[1]);
  EXPECT_EQ(row[4], sft[2]);
  // evaluations: base-eval's val bpb, each chat evaluation's accuracy
  const auto val = find(r.out, R"(\nval bpb: ([\d.]+))");
  ASSERT_EQ(val.size(), 1u) << r.out;
  EXPECT_EQ(card_row(card, "val bpb").at(1), val[0]) << card << r.out;
  const auto spelling = find(r.out, R"(SpellingBee accuracy: ([\d.]+)%)");
  const auto arith_sft = find(r.out, R"(Arithmetic accuracy: ([\d.]+)%)");
  const auto arith_rl = find(r.out, R"(Arithmetic accuracy: ([\d.]+)%)", true);
  ASSERT_FALSE(spelling.empty() || arith_sft.empty()) << r.out;
  EXPECT_EQ(card_row(card, "SpellingBee").at(2), spelling[0] + "%") << card;
  EXPECT_EQ(card_row(card, "Arithmetic").at(2), arith_sft[0] + "%") << card;
  EXPECT_EQ(card_row(card, "Arithmetic").at(3), arith_rl[0] + "%") << card;
  for (const char* part : {"## Environment", "| Stage | Wall time | Planned |", "Total wall clock time: ",
                           "| Metric | BASE | SFT | RL |", "## Chat RL", "chatsft_checkpoints/sr/report.svg"})
    EXPECT_NE(card.find(part), std::string::npos) << part << "\n" << card;
  // the end says how to talk to the model, and that works
  EXPECT_NE(r.out.find(" chat -i rl -g sr -p "), std::string::npos) << r.out;
  const Result chat = run(b, " chat -i rl -g sr -p 'What is 1 plus 1?' --max-tokens 8");
  EXPECT_EQ(chat.code, 0) << chat.out;

  // the same command again: every stage is done, nothing runs
  const Result again = run_in(b, small_road("sr"));
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("every stage of this road is done (report/speedrun.json); nothing to run"),
            std::string::npos)
      << again.out;
  EXPECT_EQ(again.out.find("measuring this machine"), std::string::npos) << "nothing to plan: " << again.out;
  EXPECT_NE(again.out.find("Report card: "), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find(" runs: "), std::string::npos) << again.out;
  // a changed output makes its stage and the later ones run again
  fs::remove(b.dir + "/report/chat-evaluation-rl.json");
  const Result third = run_in(b, small_road("sr"));
  ASSERT_EQ(third.code, 0) << third.out;
  EXPECT_NE(third.out.find("chat-eval-rl runs: report/chat-evaluation-rl.json is gone"), std::string::npos)
      << third.out;
  EXPECT_EQ(count_of(third.out, ": done already ("), 9u) << third.out;
}

namespace {

// Starts the small road in `b` (its steps made `slow` times slower, so that the test can kill the
// speedrun between two saves).
Proc start_road(const BaseDir& b, const std::string& tag, int slow) {
  std::vector<std::string> argv{"/bin/sh", "-c", "cd " + b.dir + " && exec " + nanochat_binary() + small_road(tag)};
  std::vector<std::string> env{"NANOCHAT_BASE_DIR=" + b.dir};
  env.push_back(slow > 1 ? "NANOCHAT_TEST_FAULT=slow:0:" + std::to_string(slow) : "NANOCHAT_TEST_FAULT");
  return Proc::spawn(argv, env);
}

// SIGKILLs the speedrun alone (its stage dies with it) and checks that no stage of `tag` is left.
void kill_road(Proc& p, const std::string& tag) {
  p.signal(SIGKILL);
  ASSERT_TRUE(p.wait(Ms(10000)));
  std::string pattern = "'--model-tag [";  // "[k]ill123" matches the stage, not pgrep's own shell
  pattern += tag.front();
  pattern += ']';
  pattern.append(tag, 1, std::string::npos);
  pattern += '\'';
  for (int i = 0; i < 50; ++i) {
    if (shell("pgrep -f -- " + pattern).first != 0) return;
    std::this_thread::sleep_for(Ms(100));
  }
  FAIL() << "a stage of the killed speedrun is still running: " << shell("pgrep -af -- " + pattern).second;
}

}  // namespace

TEST(Speedrun, KilledInsideEachTrainingStageTheSameCommandSkipsTheDoneStagesAndResumes) {
  BaseDir b("nc_speedrun_kill");
  const std::string tag = "kill" + std::to_string(::getpid());
  const std::string ckpt = b.dir + "/base_checkpoints/" + tag;
  // 1: killed in base-train after its save at step 6
  Proc p1 = start_road(b, tag, 30);
  ASSERT_TRUE(p1.wait_for_output("Saved checkpoint " + ckpt + "/model_000006", Ms(240000))) << p1.output();
  kill_road(p1, tag);
  EXPECT_EQ(p1.output().find("base-train done"), std::string::npos) << p1.output();
  // 2: the tokenizer stages are skipped, base-train continues from step 6 and ends; killed in
  // chat-sft after its save at step 4
  Proc p2 = start_road(b, tag, 30);
  ASSERT_TRUE(
      p2.wait_for_output("Saved checkpoint " + b.dir + "/chatsft_checkpoints/" + tag + "/model_000004", Ms(300000)))
      << p2.output();
  kill_road(p2, tag);
  const std::string& o2 = p2.output();
  for (const char* done :
       {"[1/10] data: done already", "[2/10] tok-train: done already", "[3/10] tok-eval: done already",
        "base-train was interrupted; it continues from its checkpoint at step 6", "Resumed from step 6",
        "[4/10] base-train done in"})
    EXPECT_NE(o2.find(done), std::string::npos) << done << "\n" << o2;
  EXPECT_EQ(o2.find("starts afresh"), std::string::npos) << o2;
  // the resumed base-train's losses continue the first run's: step 6's record is there once more
  const auto l = losses(ckpt + "/metrics.jsonl");
  EXPECT_EQ(l.size(), 12u);
  // 3: everything before chat-sft is skipped, chat-sft continues from step 4 and ends; killed in
  // chat-rl after its save at step 2
  Proc p3 = start_road(b, tag, 30);
  const std::string rl = b.dir + "/chatrl_checkpoints/" + tag;
  ASSERT_TRUE(p3.wait_for_output("Saved model checkpoint " + rl + "/model_000002", Ms(300000))) << p3.output();
  kill_road(p3, tag);
  const std::string& o3 = p3.output();
  EXPECT_EQ(count_of(o3, ": done already ("), 6u) << o3;
  EXPECT_NE(o3.find("chat-sft was interrupted; it continues from its checkpoint at step 4"), std::string::npos) << o3;
  // 4: chat-rl continues after its step 2 (its weights and optimizer state), the road ends
  Proc p4 = start_road(b, tag, 1);
  ASSERT_TRUE(p4.wait(Ms(300000))) << p4.output();
  const std::string& o4 = p4.output();
  EXPECT_TRUE(p4.exited_ok()) << o4;
  EXPECT_NE(o4.find("chat-rl was interrupted; it continues from its checkpoint at step 2"), std::string::npos) << o4;
  const std::string rl_log = slurp(b.dir + "/report/logs/chat-rl.log");  // both runs' lines
  const std::string rerun = rl_log.substr(std::min(rl_log.size(), rl_log.rfind("chat-rl: sft model ")));
  EXPECT_EQ(rerun.find("Step 2/4 | "), std::string::npos) << "step 2 is not trained again:\n" << rl_log;
  EXPECT_NE(rerun.find("Step 3/4 | "), std::string::npos) << rl_log;
  EXPECT_NE(o4.find("Report card: "), std::string::npos) << o4;
  // the ledger recorded each training stage's two runs
  const json ledger = json::parse(slurp(b.dir + "/report/speedrun.json"));
  EXPECT_EQ(ledger["stages"]["base-train"]["runs"], 2);
  EXPECT_EQ(ledger["stages"]["chat-sft"]["runs"], 2);
  EXPECT_EQ(ledger["stages"]["chat-rl"]["runs"], 2);
  EXPECT_EQ(ledger["stages"]["tok-train"]["runs"], 1);
}

TEST(Speedrun, ATimeBudgetPicksTheDepthThatFitsAndItsPlanIsWithinAFifthOfTheRoadsTime) {
  BaseDir b("nc_speedrun_hours");
  // A tenth of nanochat's tokens per parameter (12). The budget comes from this machine (and
  // build): a plan with hours to spare gives the roads of depth 2 and 3 (twice as wide: the tiny
  // preset's head dim of 128); the budget is then 1.6 x depth 2's road, under depth 3's, so that
  // depth 2 fits and depth 3 does not. Smaller rows than the preset's 8 x 256 time too unsteadily
  // on a 2-core VM (a fifth from one process to the next).
  const std::string flags =
      " speedrun --offline --replace-tokenizer --base-train.target-param-data-ratio 1.2 --tok-train.vocab-size 512"
      " --tok-train.max-chars 2000000 --base-eval.split-tokens 1024 --chat-eval.max-problems 8"
      " --chat-eval.max-new-tokens 16 --chat-rl.max-new-tokens 16 --chat-rl.eval-examples 4";
  const Result plan = run_in(b, flags + " --hours 10 --plan-only");
  ASSERT_EQ(plan.code, 0) << plan.out;
  const auto roads = find(plan.out, R"(: d2 \(width \d+\) ([^ ,]+), d3 \(width \d+\) ([^ ,]+))");
  ASSERT_EQ(roads.size(), 2u) << plan.out;
  auto seconds = [](const std::string& t) {  // "28.5s", "1m45s", "2h03m" (road/card.h duration_text)
    double h = 0, m = 0, sec = 0;
    if (std::sscanf(t.c_str(), "%lfh%lfm", &h, &m) == 2) return 3600 * h + 60 * m;
    if (std::sscanf(t.c_str(), "%lfm%lfs", &m, &sec) == 2) return 60 * m + sec;
    return std::stod(t);
  };
  const double d2 = seconds(roads[0]), d3 = seconds(roads[1]);
  ASSERT_LT(1.6 * d2, d3) << plan.out;
  char hours[32];
  std::snprintf(hours, sizeof hours, "%.5f", 1.6 * d2 / 3600.0);
#if defined(__SANITIZE_ADDRESS__)
  // A sanitizer build checks the choice; the plan against the road's real time is the Release
  // suite's comparison: a sanitizer build slows the loop's own work far more than the products the
  // probe times, so its road says nothing about a user's (and takes minutes here).
  const Result chosen = run_in(b, flags + " --hours " + hours + " --plan-only");
  ASSERT_EQ(chosen.code, 0) << chosen.out;
  EXPECT_TRUE(std::regex_search(chosen.out, std::regex(R"(: depth 2 fits \(its road [^ ]+ of [^)]+\))"))) << chosen.out;
  return;
#endif
  const Result r = run_in(b, flags + " --hours " + hours);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto chose = find(r.out, R"(: depth (\d+) fits \(its road ([^ ]+) of [^)]+\))");
  const auto looked = find(r.out, R"(: the roads looked at, from this machine's speed on depth \d+: ([^\n]*))");
  ASSERT_EQ(chose.size(), 2u) << r.out;
  ASSERT_EQ(looked.size(), 1u) << r.out;
  const int depth = std::stoi(chose[0]);
  EXPECT_GE(depth, 2);
  // the next depth was looked at and did not fit
  const std::string next = str_cat("d", depth + 1, " (width ");
  EXPECT_NE(looked[0].find(next), std::string::npos) << looked[0];
  EXPECT_NE(r.out.find("--model-tag d" + std::to_string(depth)), std::string::npos) << r.out;
  // the plan's time against the time the stages took
  const auto done = find(r.out, R"(the road is done: ([^ ]+) of stages \(planned ([^)]+)\))");
  ASSERT_EQ(done.size(), 2u) << r.out;
  const double took = seconds(done[0]), planned = seconds(done[1]);
  std::printf("the road took %.1f s, planned %.1f s (%+.0f%%)\n", took, planned, 100.0 * (planned - took) / took);
  EXPECT_LE(std::abs(planned - took), 0.2 * took) << "planned " << planned << " s, took " << took << " s\n" << r.out;
  // the card reports both
  const std::string card = slurp(b.dir + "/report/report.md");
  EXPECT_TRUE(std::regex_search(card, std::regex(R"(Total wall clock time: [^ ]+ \(planned [^,]+, [+-]\d+%\))")))
      << card;
  // an impossible budget says what the smallest road needs
  const Result tight = run_in(b, " speedrun --offline --hours 0.0001 --plan-only");
  EXPECT_EQ(tight.code, 1) << tight.out;
  EXPECT_NE(tight.out.find("even the smallest model's road takes longer (d2 "), std::string::npos) << tight.out;
}
