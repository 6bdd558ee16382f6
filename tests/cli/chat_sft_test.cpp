// `nanochat chat-sft` through the binary: a base checkpoint trained by base-train, conversations
// from JSONL files; one epoch saved where `chat -i sft` loads it, 1 and 2 ranks reaching the same
// parameters, an exact resume, and the bad inputs (missing or malformed files, a checkpoint of the
// wrong kind, no base checkpoint, a conversation longer than a row).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/safetensors.h"
#include "support/cli_util.h"
#include "support/sft_util.h"
#include "support/two_nodes.h"
#include "support/weights_compare.h"

using namespace nctest;

namespace {

// A base folder with a base checkpoint (base_checkpoints/t, step 4) and train/val conversations.
struct SftDir : BaseDir {
  explicit SftDir(const std::string& name) : BaseDir(name) {
    auto r = run(*this, kSftBase);
    if (r.code != 0) throw std::runtime_error("base-train failed:\n" + r.out);
    write_conversations(dir + "/train.jsonl", 48, 1);
    write_conversations(dir + "/val.jsonl", 12, 2);
  }
  std::string sft_ckpt() const { return dir + "/chatsft_checkpoints/t"; }
  std::string flags(const std::string& extra = "") const {
    return " chat-sft --model-tag t --train-jsonl " + dir + "/train.jsonl --val-jsonl " + dir +
           "/val.jsonl --eval-every 4 --eval-tokens 256 --chatcore-every -1 --threads 1" + extra;
  }
};

}  // namespace

TEST(ChatSft, TrainsOneEpochOfABaseCheckpointAndChatLoadsIt) {
  SftDir b("nc_sft_epoch");
  auto r = run(b, b.flags());
  ASSERT_EQ(r.code, 0) << r.out;
  // nanochat's inheritance lines and the warm start
  for (const char* line : {"Inherited max_seq_len=64 from pretrained checkpoint",
                           "Inherited device_batch_size=2 from pretrained checkpoint",
                           "Inherited total_batch_size=256 from pretrained checkpoint",
                           "Inherited matrix_lr=0.02 from pretrained checkpoint",
                           "Loaded optimizer state from pretrained checkpoint (momentum buffers only, LRs reset)",
                           "Step 00000 | Validation bpb:", "step 00001 ("})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  // one epoch: the run ended on its own, saved its last step, and the loss fell
  const int64_t S = last_step(b.sft_ckpt());
  ASSERT_GT(S, 2) << r.out;
  const auto l = losses(b.sft_ckpt() + "/metrics.jsonl");
  ASSERT_EQ(static_cast<int64_t>(l.size()), S);
  // steps named as the log names them (chat_sft.py counts a step before logging it): 1 .. S
  EXPECT_EQ(l.begin()->first, 1);
  EXPECT_EQ(l.rbegin()->first, S);
  EXPECT_LT(l.rbegin()->second, l.begin()->second);
  // the packed conversations plus those left in the packing buffer are the rendered ones
  const size_t packed_at = r.out.find("Conversations packed into rows: ");
  ASSERT_NE(packed_at, std::string::npos) << r.out;
  long long packed = -1, epoch = -1, rendered = -1, again = -1, buffered = -1;
  EXPECT_EQ(std::sscanf(r.out.c_str() + packed_at,
                        "Conversations packed into rows: %lld (epoch %lld); rendered: %lld (the %lld packed and %lld",
                        &packed, &epoch, &rendered, &again, &buffered),
            5)
      << r.out.substr(packed_at, 300);
  EXPECT_EQ(again, packed);
  EXPECT_EQ(packed + buffered, rendered);
  EXPECT_GT(packed, 0);
  // nanochat's meta fields
  const json meta = read_checkpoint_meta(CheckpointPaths{b.sft_ckpt(), S});
  EXPECT_EQ(meta.at("step"), S);
  EXPECT_TRUE(meta.at("val_bpb").is_number());
  EXPECT_EQ(meta.at("model_config").at("sequence_len"), 64);
  EXPECT_EQ(meta.at("user_config").at("init_lr_frac"), 0.8);
  EXPECT_TRUE(meta.at("user_config").at("max_seq_len").is_null()) << "inherited values are recorded as not given";
  // the weights moved away from the base checkpoint's
  const StFile base = load_safetensors(b.ckpt() + "/model_000004.safetensors");
  const StFile sft = load_safetensors(b.sft_ckpt() + "/model_" + std::string(6 - std::to_string(S).size(), '0') +
                                      std::to_string(S) + ".safetensors");
  EXPECT_GT(max_rel_diff(base, sft), 1e-3);
  // the chat front ends load it, and export writes it in nanochat's layout
  auto c = run(b, " chat -i sft -p 'Jane said' --threads 1");
  EXPECT_EQ(c.code, 0) << c.out;
  auto e = run(b, " export --to nanochat -i sft --out " + b.dir + "/exported");
  EXPECT_EQ(e.code, 0) << e.out;
  const std::string stem = b.dir + "/exported/chatsft_checkpoints/t/";
  const std::string s6 = std::string(6 - std::to_string(S).size(), '0') + std::to_string(S);
  EXPECT_TRUE(fs::exists(stem + "model_" + s6 + ".pt")) << e.out;
  EXPECT_TRUE(fs::exists(stem + "meta_" + s6 + ".json")) << e.out;
  e = run(b, " export --to nanochat -i sft --with-optimizer --out " + b.dir + "/exported2");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.out.find("without --with-optimizer"), std::string::npos) << e.out;
}

TEST(ChatSft, OneAndTwoRanksReachTheSameParameters) {
  SftDir b1("nc_sft_w1"), b2("nc_sft_w2");
  // nanochat's SFT lrs are not scaled by the batch (base-train's are, by sqrt(256 / 2^19) here), so
  // at this tiny batch the inherited ones are 45x base-train's and the run is chaotic enough for
  // rounding to grow; smaller lrs keep the comparison about the split, not the chaos
  const std::string extra =
      " --num-iterations 5 --eval-every -1 --embedding-lr 0.02 --unembedding-lr 0.002 --matrix-lr 0.005";
  auto r1 = run(b1, b1.flags(extra));
  ASSERT_EQ(r1.code, 0) << r1.out;
  auto r2 = run(b2, " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) +
                        b2.flags(extra));
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_NE(r2.out.find("All 2 ranks agree"), std::string::npos) << r2.out;
  EXPECT_NE(r2.out.find("node 0 packs the conversations"), std::string::npos) << r2.out;
  // --num-iterations 5 trains 4 steps, as nanochat's does
  ASSERT_EQ(last_step(b1.sft_ckpt()), 4) << r1.out;
  ASSERT_EQ(last_step(b2.sft_ckpt()), 4) << r2.out;
  const StFile w1 = load_safetensors(b1.sft_ckpt() + "/model_000004.safetensors");
  const StFile w2 = load_safetensors(b2.sft_ckpt() + "/model_000004.safetensors");
  const double d = max_rel_diff(w1, w2, true);
  EXPECT_LE(d, 1e-4) << "W=1 vs W=2";
  const auto l1 = losses(b1.sft_ckpt() + "/metrics.jsonl"), l2 = losses(b2.sft_ckpt() + "/metrics.jsonl");
  ASSERT_EQ(l1.size(), l2.size());
  for (const auto& [s, v] : l1) EXPECT_NEAR(l2.at(s), v, 1e-5 * std::fabs(v)) << "step " << s;
  std::printf("max relative parameter difference W1-W2: %.3g\n", d);
}

TEST(ChatSft, ResumeReproducesTheUninterruptedRunAndContinuesAtAnotherWorldSize) {
  SftDir b("nc_sft_resume");
  // the smaller lrs of OneAndTwoRanksReachTheSameParameters, for the resume at 2 ranks
  const std::string extra =
      " --num-iterations 7 --eval-every -1 --save-every 3 --embedding-lr 0.02 --unembedding-lr 0.002 --matrix-lr "
      "0.005";
  auto r1 = run(b, b.flags(extra));
  ASSERT_EQ(r1.code, 0) << r1.out;
  const std::string straight = slurp(b.sft_ckpt() + "/model_000006.safetensors");
  const auto l1 = losses(b.sft_ckpt() + "/metrics.jsonl");
  auto r2 = run(b, b.flags(extra + " --resume-from-step 3"));
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_NE(r2.out.find("Resumed from step 3"), std::string::npos) << r2.out;
  EXPECT_TRUE(slurp(b.sft_ckpt() + "/model_000006.safetensors") == straight) << "the resumed run's weights differ";
  const auto l2 = losses(b.sft_ckpt() + "/metrics.jsonl");
  for (int64_t s = 3; s < 6; ++s) EXPECT_EQ(l2.at(s), l1.at(s)) << "step " << s;
  // the 1-rank checkpoint of step 3 resumed by 2 ranks: the same run up to rounding
  auto r3 = run(b, " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port()) +
                       b.flags(extra + " --resume-from-step 3"));
  ASSERT_EQ(r3.code, 0) << r3.out;
  EXPECT_NE(r3.out.find("Re-sharded the optimizer state of 1 ranks for 2 ranks"), std::string::npos) << r3.out;
  std::ofstream(b.dir + "/straight.safetensors", std::ios::binary) << straight;  // the weights saved above
  const StFile want = load_safetensors(b.dir + "/straight.safetensors");
  const StFile got = load_safetensors(b.sft_ckpt() + "/model_000006.safetensors");
  EXPECT_LE(max_rel_diff(want, got, true), 1e-4) << "resumed at 2 ranks";
}

TEST(ChatSft, BadInputsAreNamed) {
  SftDir b("nc_sft_bad");
  // a missing file: its path
  auto r = run(b, " chat-sft --model-tag t --train-jsonl " + b.dir + "/nope.jsonl --eval-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("chat-sft: cannot read " + b.dir +
                       "/nope.jsonl (no such file on this node); check the path "
                       "given to --train-jsonl"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("peak"), std::string::npos) << "named before the model is built:\n" << r.out;
  // a malformed row: the file and the row, before any step
  {
    std::ofstream f(b.dir + "/bad.jsonl");
    f << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})"
      << "\n\n";
    f << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]})"
      << "\n";
  }
  r = run(b, " chat-sft --model-tag t --train-jsonl " + b.dir + "/bad.jsonl --eval-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(b.dir + "/bad.jsonl row 3: message 1 is from the user"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 00001"), std::string::npos) << r.out;
  {
    std::ofstream f(b.dir + "/notjson.jsonl");
    f << "{\"messages\": [\n";
  }
  r = run(b, " chat-sft --model-tag t --train-jsonl " + b.dir + "/notjson.jsonl --eval-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(b.dir + "/notjson.jsonl row 1: "), std::string::npos) << r.out;
  // no validation file while evaluating
  r = run(b, " chat-sft --model-tag t --train-jsonl " + b.dir + "/train.jsonl --threads 1 --chatcore-every -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--val-jsonl"), std::string::npos) << r.out;
  // no base checkpoint of that tag: the folder and the command that writes it
  r = run(b, " chat-sft --model-tag nope --train-jsonl " + b.dir + "/train.jsonl --eval-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(b.dir + "/base_checkpoints/nope"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nanochat base-train"), std::string::npos) << r.out;
  // an SFT checkpoint where a base one is expected: named as chat SFT's
  r = run(b, b.flags(" --num-iterations 2 --eval-every -1"));
  ASSERT_EQ(r.code, 0) << r.out;
  fs::copy(b.sft_ckpt(), b.dir + "/base_checkpoints/sft_copy");
  r = run(b, " chat-sft --model-tag sft_copy --train-jsonl " + b.dir + "/train.jsonl --eval-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("was written by chat SFT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("base_checkpoints/sft_copy/meta_000001.json"), std::string::npos) << r.out;
}

TEST(ChatSft, AConversationLongerThanARowIsCutAndCounted) {
  SftDir b("nc_sft_long");
  {
    std::ofstream f(b.dir + "/long.jsonl");
    std::string words;
    for (int i = 0; i < 120; ++i) words += " Elizabeth";
    f << json{{"messages",
               json::array({{{"role", "user"}, {"content", "Say it."}}, {{"role", "assistant"}, {"content", words}}})}}
             .dump()
      << "\n";
  }
  auto r = run(b, " chat-sft --model-tag t --train-jsonl " + b.dir + "/long.jsonl," + b.dir +
                      "/train.jsonl --eval-every -1 --threads 1 --chatcore-every -1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Training conversations: 49"), std::string::npos) << r.out;
  // the long conversation is cut each time it is rendered (the buffer of 100 holds the 49 more than once)
  EXPECT_NE(r.out.find("renders longer than a row of 65 tokens and cut to it: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("renders longer than a row of 65 tokens and cut to it: 0 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 00002"), std::string::npos) << r.out;
}

// Without --train-jsonl: nanochat's mixture from task_data/ (the tasks' fixture datasets); a dataset
// that is not downloaded is named with its manifest and the download command.
TEST(ChatSft, TrainsOnNanochatsMixtureAndNamesAMissingDataset) {
  SftDir b("nc_sft_mix");
  fs::copy(std::string(NANOCHAT_TEST_DATA) + "/tasks/task_data", b.dir + "/task_data", fs::copy_options::recursive);
  // the fixtures hold no GSM8K train split
  auto r = run(b, " chat-sft --model-tag t --eval-every -1 --chatcore-every -1 --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(b.dir + "/task_data/openai--gsm8k/main/train/manifest.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nanochat data download"), std::string::npos) << r.out;
  r = run(b,
          " chat-sft --model-tag t --gsm8k-epochs 0 --mmlu-epochs 2 --eval-every 2 --eval-tokens 256 "
          "--chatcore-every -1 --threads 1 --num-iterations 4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Training mixture: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(MMLU x2, GSM8K x0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Step 00002 | Validation bpb:"), std::string::npos) << r.out;
  EXPECT_EQ(last_step(b.sft_ckpt()), 3) << r.out;
}

// Two nodes, the worker's folder empty and the worker slowed (rows dealt unevenly): node 0 reads
// the base checkpoint and the conversations and serves the rows, the tokenizer and the val batches;
// the weights and val bpb equal the one-process run's and the worker writes nothing.
TEST(ChatSft, AWorkerWithAnEmptyFolderTrainsLikeOneProcess) {
  SftDir one("nc_sft_one"), n0("nc_sft_node0");
  EmptyDir n1("nc_sft_node1");
  const std::string extra =
      " --num-iterations 5 --eval-every 2 --embedding-lr 0.02 --unembedding-lr 0.002 --matrix-lr 0.005";
  auto r = run(one, one.flags(extra));
  ASSERT_EQ(r.code, 0) << r.out;
  auto [a0, a1] = two_nodes(n0.dir, n1.dir, n0.flags(extra), "NANOCHAT_TEST_FAULT=slow:1:3");
  ASSERT_EQ(a0.code, 0) << a0.out << "\n--- node 1:\n" << a1.out;
  ASSERT_EQ(a1.code, 0) << a1.out;
  EXPECT_NE(a0.out.find("node 0 packs the conversations"), std::string::npos) << a0.out;
  EXPECT_TRUE(n1.contents().empty()) << "the worker wrote " << n1.contents().front();
  const StFile w1 = load_safetensors(one.sft_ckpt() + "/model_000004.safetensors");
  const StFile w2 = load_safetensors(n0.sft_ckpt() + "/model_000004.safetensors");
  EXPECT_LE(max_rel_diff(w1, w2, true), 1e-4);
  for (const char* key : {"Step 00002 | Validation bpb: ", "Step 00004 | Validation bpb: "}) {
    const auto p1 = r.out.find(key), p2 = a0.out.find(key);
    ASSERT_NE(p1, std::string::npos) << r.out;
    ASSERT_NE(p2, std::string::npos) << a0.out;
    EXPECT_NEAR(std::stod(r.out.substr(p1 + std::strlen(key), 10)), std::stod(a0.out.substr(p2 + std::strlen(key), 10)),
                1e-4)
        << key;
  }
}

// --load-optimizer 1 keeps the Muon weight decay the base run's last step used (nanochat's
// load_state_dict keeps the group's value): wd_scaled * 0.5 * (1 + cos(pi * 3 / 4)) after 4 steps;
// --load-optimizer 0 starts a fresh optimizer with weight decay 0.
TEST(ChatSft, TheLoadedOptimizerKeepsTheBaseRunsLastWeightDecay) {
  BaseDir b("nc_sft_wd");
  std::string base = kSftBase;
  base.erase(base.find(" --weight-decay 0"));
  auto r = run(b, base);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string key = "Scaling weight decay from 0.280000 to ";
  const auto at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double wd_scaled = std::stod(r.out.substr(at + key.size(), 12));
  write_conversations(b.dir + "/train.jsonl", 24, 3);
  const std::string flags = " chat-sft --model-tag t --train-jsonl " + b.dir +
                            "/train.jsonl --eval-every -1 --chatcore-every -1 --threads 1"
                            " --num-iterations 2";
  r = run(b, flags);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string wd_key = "Muon weight decay: ";
  const auto w = r.out.find(wd_key);
  ASSERT_NE(w, std::string::npos) << r.out;
  const double want = wd_scaled * 0.5 * (1 + std::cos(M_PI * 3 / 4));
  EXPECT_NEAR(std::stod(r.out.substr(w + wd_key.size(), 16)), want, 1e-5 * want) << r.out;
  std::printf("wd_scaled %.9g, loaded Muon weight decay %s\n", wd_scaled, r.out.substr(w + wd_key.size(), 16).c_str());
  // a resume continues with that weight decay (the meta records it): the same weights as straight on
  r = run(b, flags + " --num-iterations 4 --save-every 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string straight = slurp(b.dir + "/chatsft_checkpoints/t/model_000003.safetensors");
  r = run(b, flags + " --num-iterations 4 --save-every 2 --resume-from-step 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(slurp(b.dir + "/chatsft_checkpoints/t/model_000003.safetensors") == straight) << r.out;
  r = run(b, flags + " --load-optimizer 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Muon weight decay: 0;"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Loaded optimizer state"), std::string::npos) << r.out;
}

// ChatCORE during chat-sft (nanochat's --chatcore-every): without the five tasks' files the run
// trains on and says why ChatCORE is skipped; with them (the tasks' fixture datasets) the estimate
// at the last step equals chat-eval's on the saved checkpoint with the same problem limits, and
// metrics.jsonl records it.
TEST(ChatSft, ChatCoreAtTheLastStepEqualsChatEvalOfTheSavedCheckpoint) {
  SftDir b("nc_sft_chatcore");
  const std::string sft = " chat-sft --model-tag t --train-jsonl " + b.dir +
                          "/train.jsonl --eval-every -1 --threads 1 --chatcore-every 100 --chatcore-max-cat 2"
                          " --chatcore-max-sample 2";
  auto r = run(b, sft);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("NOTE: ChatCORE (--chatcore-every) is skipped: rank 0 cannot open its tasks"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("| ChatCORE:"), std::string::npos) << r.out;

  fs::copy(std::string(NANOCHAT_TEST_DATA) + "/tasks/task_data", b.dir + "/task_data", fs::copy_options::recursive);
  fs::remove_all(b.sft_ckpt());
  r = run(b, sft);
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("| ChatCORE: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::string during = r.out.substr(at + 12);  // "Step 00005 | ChatCORE: 0.1234 | ChatCORE_cat: ..."
  during = during.substr(0, during.find(' '));
  for (const char* task : {"  ARC-Easy: ", "  ARC-Challenge: ", "  MMLU: ", "  GSM8K: ", "  HumanEval: "})
    EXPECT_NE(r.out.find(task), std::string::npos) << task << "\n" << r.out;
  std::ifstream metrics(b.sft_ckpt() + "/metrics.jsonl");
  std::string line;
  bool recorded = false;
  while (std::getline(metrics, line))
    if (line.find("\"chatcore\"") != std::string::npos && line.find("\"chatcore/GSM8K\"") != std::string::npos)
      recorded = true;
  EXPECT_TRUE(recorded);

  auto e = run(b, " chat-eval -i sft -g t -x 2 --threads 1");
  ASSERT_EQ(e.code, 0) << e.out;
  const size_t m = e.out.find("ChatCORE metric: ");
  ASSERT_NE(m, std::string::npos) << e.out;
  std::string after = e.out.substr(m + 17);
  after = after.substr(0, after.find('\n'));
  EXPECT_EQ(during, after) << r.out << "\n" << e.out;
}

// A rank that dies stops a chat-sft job of a fixed set of nodes with a message naming the step, with
// no step total (the data ends the run), and node 0's last checkpoint to resume from; chat-rl
// refuses an elastic --nnodes MIN:MAX before any rank starts (chat-sft's is tests/cli/elastic_sft_test).
TEST(ChatSft, ALostRankStopsTheJobNamingTheStepAndTheCheckpoint) {
  SftDir b("nc_sft_lost");
  const std::string launch =
      " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port());
  auto r =
      run(b, launch + b.flags(" --num-iterations 9 --eval-every -1 --save-every 3"), "NANOCHAT_TEST_FAULT=die:1:5");
  ASSERT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the job stopped in step 5 (training the step) because a node left"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("The last checkpoint is step 3 in node 0's " + b.sft_ckpt()), std::string::npos) << r.out;
  EXPECT_EQ(last_step(b.sft_ckpt()), 3) << r.out;

  auto e = run(b, " run --nnodes 1:2 --master-addr 127.0.0.1 --allow-loopback-master chat-eval -i sft -g t");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.out.find("--nnodes 1:2 (an elastic job: nodes may leave and join) is for base-train, chat-sft, chat-rl "
                       "and speedrun; chat-eval runs on a fixed set of nodes: pass --nnodes 2"),
            std::string::npos)
      << e.out;
  EXPECT_EQ(e.out.find("[rank "), std::string::npos) << "a rank started:\n" << e.out;
}
