// The road as data (road/stages.h), its ledger (road/ledger.h) and the card's table (road/card.h):
// the runcpu preset against nanochat's runs/runcpu.sh flags, overrides under any spelling of a
// flag, the offline road, the stage records that decide what runs again.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "nanochat/core/error.h"
#include "nanochat/core/report_log.h"
#include "nanochat/road/card.h"
#include "nanochat/road/ledger.h"
#include "nanochat/road/stages.h"
#include "support/temp_dir.h"

using namespace nanochat;
using namespace nanochat::road;
namespace fs = std::filesystem;

namespace {

const Stage* stage(const std::vector<Stage>& road, const std::string& id) {
  for (const Stage& s : road)
    if (s.id == id) return &s;
  return nullptr;
}

std::vector<std::string> ids(const std::vector<Stage>& road) {
  std::vector<std::string> out;
  for (const Stage& s : road) out.push_back(s.id);
  return out;
}

RoadOptions options(const std::string& preset, bool offline) {
  RoadOptions o;
  o.preset = preset;
  o.offline = offline;
  o.base_dir = "/base";
  o.data_dir = "/base/base_data_climbmix";
  return o;
}

}  // namespace

TEST(RoadStages, RuncpuIsNanochatsRuncpuShStageForStage) {
  const auto road = plan_road(options("runcpu", false));
  // runs/runcpu.sh (nanochat 92d63d4): dataset -n 8, tok_train --max-chars=2000000000, tok_eval,
  // base_train, base_eval, chat_sft; no RL (it stops after SFT), plus chat-eval for the card
  EXPECT_EQ(ids(road), (std::vector<std::string>{"data", "tok-train", "tok-eval", "base-train", "base-eval", "chat-sft",
                                                 "chat-eval-sft"}));
  EXPECT_EQ(stage(road, "data")->commands.front(), (std::vector<std::string>{"data", "download", "-n", "8"}));
  EXPECT_EQ(flag_value(stage(road, "tok-train")->commands[0], "--max-chars"), "2000000000");
  const auto& bt = stage(road, "base-train")->commands[0];
  const std::vector<std::pair<std::string, std::string>> base_train = {
      {"--depth", "6"},          {"--head-dim", "64"},          {"--window-pattern", "L"},
      {"--max-seq-len", "512"},  {"--device-batch-size", "32"}, {"--total-batch-size", "16384"},
      {"--eval-every", "100"},   {"--eval-tokens", "524288"},   {"--core-metric-every", "-1"},
      {"--sample-every", "100"}, {"--num-iterations", "5000"}};
  for (const auto& [flag, value] : base_train) EXPECT_EQ(flag_value(bt, flag), value) << flag;
  const auto& be = stage(road, "base-eval")->commands[0];
  EXPECT_EQ(flag_value(be, "--device-batch-size"), "1");
  EXPECT_EQ(flag_value(be, "--split-tokens"), "16384");
  EXPECT_EQ(flag_value(be, "--max-per-task"), "16");
  EXPECT_EQ(flag_value(be, "--eval"), "") << "online: CORE runs (the bundle is downloaded)";
  const auto& sft = stage(road, "chat-sft")->commands[0];
  EXPECT_EQ(flag_value(sft, "--eval-every"), "200");
  EXPECT_EQ(flag_value(sft, "--eval-tokens"), "524288");
  EXPECT_EQ(flag_value(sft, "--num-iterations"), "1500");
  // the model tag: nanochat's default d<depth>, on every stage that reads or writes the model
  EXPECT_EQ(flag_value(bt, "--model-tag"), "d6");
  EXPECT_EQ(flag_value(be, "-g"), "d6");
  EXPECT_EQ(flag_value(sft, "--model-tag"), "d6");
}

TEST(RoadStages, OfflineTinyWalksTheWholeRoadOnTheSyntheticTasks) {
  RoadOptions o = options("tiny", true);
  o.demo_corpus_script = "/src/scripts/demo_corpus.sh";
  const auto road = plan_road(o);
  EXPECT_EQ(ids(road), (std::vector<std::string>{"data", "tok-train", "tok-eval", "base-train", "base-eval", "sft-data",
                                                 "chat-sft", "chat-eval-sft", "chat-rl", "chat-eval-rl"}));
  EXPECT_EQ(stage(road, "data")->commands.front().at(1), "/src/scripts/demo_corpus.sh");
  EXPECT_EQ(flag_value(stage(road, "base-eval")->commands[0], "--eval"), "bpb,sample") << "no CORE bundle offline";
  const auto& sft = stage(road, "chat-sft")->commands[0];
  EXPECT_NE(flag_value(sft, "--train-jsonl").find("/base/speedrun/sft/SpellingBee.jsonl"), std::string::npos);
  EXPECT_EQ(flag_value(sft, "--chatcore-every"), "-1");
  EXPECT_EQ(flag_value(stage(road, "chat-eval-sft")->commands[0], "-a"), "SpellingBee|Arithmetic");
  EXPECT_EQ(flag_value(stage(road, "chat-rl")->commands[0], "--task"), "Arithmetic");
  EXPECT_EQ(stage(road, "chat-sft")->checkpoint_dir, "chatsft_checkpoints/d4");
  // with the eval bundle there, CORE runs offline too; --rl off drops the RL stages
  o.eval_bundle_present = true;
  o.rl = false;
  const auto road2 = plan_road(o);
  EXPECT_EQ(flag_value(stage(road2, "base-eval")->commands[0], "--eval"), "");
  EXPECT_EQ(stage(road2, "chat-rl"), nullptr);
  EXPECT_EQ(stage(road2, "chat-eval-rl"), nullptr);
  // an unknown preset is named
  EXPECT_THROW(plan_road(options("huge", false)), nanochat::Error);
}

TEST(RoadStages, AnOverrideReplacesTheFlagUnderAnySpellingInEveryStageOfItsCommand) {
  RoadOptions o = options("tiny", true);
  o.overrides.push_back({"chat-eval", {"--max-problems", "-x"}, "7", true});
  o.overrides.push_back({"base-train", {"--depth"}, "8", true});
  o.overrides.push_back({"base-train", {"--profile"}, "", false});
  const auto road = plan_road(o);
  for (const char* id : {"chat-eval-sft", "chat-eval-rl"}) {
    const auto& c = stage(road, id)->commands[0];
    EXPECT_EQ(std::count(c.begin(), c.end(), "-x"), 0) << id;
    EXPECT_EQ(flag_value(c, "--max-problems"), "7") << id;
    EXPECT_EQ(flag_value(c, "-g"), "d8") << id << ": the tag follows the depth";
  }
  const auto& bt = stage(road, "base-train")->commands[0];
  EXPECT_EQ(std::count(bt.begin(), bt.end(), "--depth"), 1);
  EXPECT_EQ(flag_value(bt, "--depth"), "8");
  EXPECT_NE(std::find(bt.begin(), bt.end(), "--profile"), bt.end()) << "a flag without a value";
  // --flag=value is replaced too
  std::vector<std::string> c{"base-train", "--depth=4", "--eval-every", "5"};
  EXPECT_TRUE(apply_override(c, {"base-train", {"--depth"}, "6", true}));
  EXPECT_EQ(c, (std::vector<std::string>{"base-train", "--eval-every", "5", "--depth", "6"}));
  EXPECT_FALSE(apply_override(c, {"chat-sft", {"--depth"}, "6", true}));
}

TEST(RoadLedger, AStageIsDoneWhileItsFlagsAndOutputsAreTheSame) {
  nctest::TempDir t("nc_road_ledger");
  fs::create_directories(t.dir + "/tokenizer");
  std::ofstream(t.dir + "/tokenizer/tokenizer.json") << "{\"a\": 1}";
  Stage s{"tok-train", "Tokenizer training", {{"tok-train", "--vocab-size", "512"}}, "", {"tokenizer"}, "", false};
  Ledger l(t.dir + "/speedrun.json");
  EXPECT_EQ(l.why_run(s, t.dir), "not run yet");
  l.started(s);
  EXPECT_TRUE(l.interrupted(s));
  EXPECT_EQ(l.why_run(s, t.dir), "it did not finish");
  l.finished(s, 1.5, t.dir);
  EXPECT_EQ(l.why_run(s, t.dir), "");
  EXPECT_FALSE(l.interrupted(s));
  // read back from its file
  Ledger again(t.dir + "/speedrun.json");
  EXPECT_EQ(again.why_run(s, t.dir), "");
  EXPECT_EQ(again.stage("tok-train")["runs"], 1);
  EXPECT_DOUBLE_EQ(again.stage("tok-train")["seconds"].get<double>(), 1.5);
  // another flag, a changed file, a new file, a removed file
  Stage other = s;
  other.commands[0][2] = "1024";
  EXPECT_EQ(again.why_run(other, t.dir),
            "its commands changed since it ran (flags, or what the road found in the base folder)");
  std::ofstream(t.dir + "/tokenizer/tokenizer.json") << "{\"a\": 2}";
  EXPECT_EQ(again.why_run(s, t.dir), "tokenizer/tokenizer.json changed since it was made");
  std::ofstream(t.dir + "/tokenizer/tokenizer.json") << "{\"a\": 1}";
  std::ofstream(t.dir + "/tokenizer/extra.bin") << "x";
  EXPECT_EQ(again.why_run(s, t.dir), "tokenizer/extra.bin is new");
  fs::remove(t.dir + "/tokenizer/extra.bin");
  fs::remove(t.dir + "/tokenizer/tokenizer.json");
  EXPECT_EQ(again.why_run(s, t.dir), "tokenizer/tokenizer.json is gone");
  // "<folder>/*<suffix>": only those files count (the data check's cache next to the shards does not)
  fs::create_directories(t.dir + "/data");
  std::ofstream(t.dir + "/data/shard_00000.parquet") << "p";
  Stage data{"data", "Data", {}, "", {t.dir + "/data/*.parquet"}, "", false};
  const auto sums = checksum_outputs(data, t.dir);
  EXPECT_EQ(sums.size(), 1u);
  EXPECT_TRUE(sums.contains(t.dir + "/data/shard_00000.parquet")) << sums.dump();
}

TEST(RoadCard, TheSummaryTableShowsEachStagesNumbersAsPrinted) {
  nctest::TempDir t("nc_road_card");
  ASSERT_EQ(setenv("NANOCHAT_BASE_DIR", t.dir.c_str(), 1), 0);
  log_report_section("base-model-training", "Base model training",
                     {{"val_bpb", 2.85092}, {"tokens", 245760}, {"tok_per_sec", 5806}, {"mfu_percent", 46.57}});
  log_report_section("base-model-evaluation", "Base model evaluation",
                     {{"val bpb", 2.860409}, {"CORE", 0.1234}, {"samples", {"<|bos|>The capital of France is\xff,"}}});
  log_report_section("chat-evaluation-sft", "Chat evaluation sft",
                     {{"ARC-Easy", 0.25}, {"GSM8K", 0.0125}, {"ChatCORE", 0.0417}});
  log_report_section("chat-evaluation-rl", "Chat evaluation rl", {{"GSM8K", 0.05}});
  const auto rows = metrics_table(report_dir());
  auto row = [&](const std::string& m) {
    for (const auto& r : rows)
      if (r[0] == m) return r;
    return std::vector<std::string>{};
  };
  EXPECT_EQ(row("val bpb"), (std::vector<std::string>{"val bpb", "2.860409", "-", "-"}));
  EXPECT_EQ(row("CORE"), (std::vector<std::string>{"CORE", "0.1234", "-", "-"}));
  EXPECT_EQ(row("ARC-Easy"), (std::vector<std::string>{"ARC-Easy", "-", "25.00%", "-"}));
  EXPECT_EQ(row("GSM8K"), (std::vector<std::string>{"GSM8K", "-", "1.25%", "5.00%"}));
  EXPECT_EQ(row("ChatCORE"), (std::vector<std::string>{"ChatCORE", "-", "0.0417", "-"}));
  EXPECT_TRUE(row("MMLU").empty()) << "a task no stage evaluated has no row";
  const std::string card = render_card(report_dir(), nlohmann::json(), {this_node()}, t.dir);
  EXPECT_NE(card.find("| Base model training | - | - | 245,760 | 5,806 | 46.57% | - |"), std::string::npos) << card;
  EXPECT_NE(card.find("The capital of France is\xef\xbf\xbd,"), std::string::npos) << "a cut character is U+FFFD";
  unsetenv("NANOCHAT_BASE_DIR");
}
