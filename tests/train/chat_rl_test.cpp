// Reinforcement learning (train/chat_rl.h): the policy-gradient loss and gradients of one example's
// two passes against nanochat's chat_rl computed with its own GPT (tests/fixtures/chat/
// rl_pg.safetensors, written by tools/chat/make_rl_fixture.py), the rollout's layout, and a short
// run whose reward rises on an easy task (the first letter of the answer is a lowercase letter or
// a digit), with its pass@k evaluations and checkpoints.
#include <gtest/gtest.h>

#include <chrono>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/engine/engine.h"
#include "nanochat/model/gpt.h"
#include "nanochat/train/chat_rl.h"
#include "support/byte_tokenizer.h"
#include "support/error_of.h"
#include "support/thread_communicator.h"

namespace nanochat {
namespace {

using nlohmann::json;

const Tokenizer& byte_tok() { return nctest::byte_tokenizer(); }

TEST(ChatRl, PolicyGradientEqualsNanochats) {
  StFile f = load_safetensors(std::string(NANOCHAT_TEST_DATA) + "/chat/rl_pg.safetensors");
  auto model = std::make_unique<GPT>(ModelConfig::from_json(json::parse(f.metadata.at("config"))));
  for (const ParamInfo& p : model->params()) {
    const std::vector<float> w = f.at("param." + p.name).to_f32();
    ASSERT_EQ(w.size(), p.numel) << p.name;
    std::copy(w.begin(), w.end(), model->param(p.name));
  }
  const json ro = json::parse(f.metadata.at("rollout"));
  const std::vector<double> want_losses = json::parse(f.metadata.at("losses")).get<std::vector<double>>();
  RlRollout r;
  r.prefix_length = ro.at("prefix_length");
  r.sequences = ro.at("sequences").get<std::vector<std::vector<int32_t>>>();
  r.masks = ro.at("masks").get<std::vector<std::vector<uint8_t>>>();
  r.rewards = ro.at("rewards").get<std::vector<double>>();
  r.advantages = ro.at("advantages").get<std::vector<double>>();
  const size_t dbs = ro.at("device_batch_size");
  const int64_t epr = ro.at("examples_per_rank");
  const size_t passes = r.sequences.size() / dbs;
  ASSERT_EQ(passes, want_losses.size());
  model->zero_grad();
  for (size_t p = 0; p < passes; ++p) {
    const double loss = policy_gradient_backward(*model, r, p * dbs, (p + 1) * dbs, static_cast<int64_t>(passes) * epr);
    EXPECT_NEAR(loss, want_losses[p], 1e-5 * std::max(1.0, std::fabs(want_losses[p]))) << "pass " << p;
  }
  int compared = 0;
  for (const ParamInfo& p : model->params()) {
    const std::vector<float> want = f.at("grad." + p.name).to_f32();
    ASSERT_EQ(want.size(), p.numel) << p.name;
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
      err = std::max(err, std::fabs(static_cast<double>(model->grad(p.name)[i]) - want[i]));
    }
    EXPECT_LE(err, 1e-4 * scale) << p.name << " (max |grad| " << scale << ")";
    compared += scale > 0;
  }
  EXPECT_EQ(compared, static_cast<int>(model->params().size()));  // every tensor has a gradient
}

// A generative task whose answer is judged by its first byte: lowercase letters and digits pass
// (36 of the 265 tokens, so a fresh model passes about one sample in seven).
class FirstLetterTask final : public tasks::Task {
 public:
  explicit FirstLetterTask(int64_t n) : n_(n) {}
  std::string name() const override { return "FirstLetter"; }
  tasks::EvalType eval_type() const override { return tasks::EvalType::Generative; }
  int64_t size() const override { return n_; }
  tasks::Example get(int64_t i) const override {
    tasks::Example ex;
    ex.conversation.messages = {Message::plain(Message::Role::User, "Item " + std::to_string(i) + ": say a letter."),
                                Message::plain(Message::Role::Assistant, "a")};
    return ex;
  }
  bool evaluate(const tasks::Example&, const std::string& completion) const override {
    if (completion.empty()) return false;
    const char c = completion[0];
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  }

 private:
  int64_t n_;
};

std::unique_ptr<GPT> tiny_model(int n_layer = 2) {
  ModelConfig c;
  c.sequence_len = 64;
  c.vocab_size = 265;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.window_pattern = "L";
  auto m = std::make_unique<GPT>(c);
  m->init_weights(7);
  return m;
}

TEST(ChatRl, RolloutLayout) {
  auto model = tiny_model();
  Engine engine(*model, byte_tok());
  FirstLetterTask task(4);
  RolloutOptions o;
  o.num_samples = 6;
  o.device_batch_size = 3;
  o.max_new_tokens = 5;
  const RlRollout r = sample_rollout(engine, task, 2, 0, o);
  const std::vector<int32_t> prompt = render_for_completion(byte_tok(), task.get(2).conversation);
  ASSERT_EQ(r.sequences.size(), 6u);
  EXPECT_EQ(r.prefix_length, static_cast<int64_t>(prompt.size()));
  double sum_adv = 0, mean = 0;
  for (double x : r.rewards) mean += x / 6;
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_EQ(r.masks[i].size(), r.sequences[i].size());
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), r.sequences[i].begin()));
    EXPECT_LE(r.sequences[i].size(), prompt.size() + 5);
    for (size_t t = 0; t < prompt.size(); ++t) EXPECT_EQ(r.masks[i][t], 0);
    const std::string text = byte_tok().decode(
        std::vector<int32_t>(r.sequences[i].begin() + static_cast<ptrdiff_t>(prompt.size()), r.sequences[i].end()));
    EXPECT_EQ(r.rewards[i], task.evaluate({}, text) ? 1.0 : 0.0);
    EXPECT_DOUBLE_EQ(r.advantages[i], r.rewards[i] - mean);
    sum_adv += r.advantages[i];
  }
  EXPECT_NEAR(sum_adv, 0.0, 1e-12);
  // the two generate() calls draw differently: the six samples are not three pairs of twins
  EXPECT_NE(rollout_seed(0, 0, 2, 0), rollout_seed(0, 0, 2, 1));
  EXPECT_NE(rollout_seed(0, 1, 2, 0), rollout_seed(0, 0, 2, 0));
  o.num_samples = 4;
  EXPECT_NE(nctest::error_of([&] { sample_rollout(engine, task, 0, 0, o); }).find("positive multiple"),
            std::string::npos);
}

TEST(ChatRl, RewardRisesOnAnEasyTask) {
  auto model = tiny_model();
  FirstLetterTask train(4 * 24), val(8);
  ChatRlOptions o;
  o.rollout.num_samples = 8;
  o.rollout.device_batch_size = 8;
  o.rollout.max_new_tokens = 1;
  o.rollout.top_k = 0;
  o.examples_per_step = 4;  // 24 steps
  o.init_lr_frac = 0.5f;    // nanochat's learning rates otherwise, at ten times its initial fraction
  o.eval_every = 12;
  o.eval_examples = 2;
  o.save_every = 10;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("chat_rl_test_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  o.checkpoint_dir = dir;
  o.meta = {{"model_config", model->config().to_json()}};
  std::vector<ChatRlStep> steps;
  std::vector<int64_t> evals, saves;
  ChatRlCallbacks cb;
  cb.on_step = [&](const ChatRlStep& s) { steps.push_back(s); };
  cb.on_eval = [&](int64_t step, const std::vector<double>& pk) {
    evals.push_back(step);
    ASSERT_EQ(pk.size(), 8u);
    for (size_t k = 1; k < pk.size(); ++k) EXPECT_GE(pk[k], pk[k - 1]);  // pass@k never falls with k
    for (double x : pk) EXPECT_TRUE(x >= 0 && x <= 1);
  };
  cb.on_save = [&](int64_t step, const std::string&) { saves.push_back(step); };
  LocalCommunicator comm;
  run_chat_rl(*model, byte_tok(), train, val, o, comm, cb);
  ASSERT_EQ(steps.size(), 24u);
  EXPECT_EQ(evals, (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(saves, (std::vector<int64_t>{10, 20, 23}));
  EXPECT_EQ(complete_checkpoint_steps(dir), (std::vector<int64_t>{10, 20, 23}));
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) first += steps[i].mean_reward / 4;
  for (int i = 20; i < 24; ++i) last += steps[i].mean_reward / 4;
  EXPECT_LT(steps[0].mean_reward, 0.3);  // about 36 tokens of 265 pass at first
  EXPECT_GT(last, 0.45) << "reward over the first four steps " << first << ", over the last four " << last;
  EXPECT_GT(last, first + 0.3) << "reward over the first four steps " << first << ", over the last four " << last;
  EXPECT_DOUBLE_EQ(steps[0].lrm, 1.0);
  EXPECT_DOUBLE_EQ(steps[23].lrm, 1.0 - 23.0 / 24.0);
  // the last checkpoint holds the final weights
  StFile saved = load_safetensors(CheckpointPaths{dir, 23}.model());
  for (const ParamInfo& p : model->params()) {
    const std::vector<float> w = saved.at(p.name).to_f32();
    ASSERT_EQ(w.size(), p.numel);
    EXPECT_TRUE(std::equal(w.begin(), w.end(), model->param(p.name))) << p.name;
  }
  std::filesystem::remove_all(dir);
}

// A run on one rank and the same run on W ranks (threads), with each rank's step records.
struct SoloAndRanks {
  std::unique_ptr<GPT> solo_model;
  std::vector<ChatRlStep> solo_steps;
  std::vector<std::unique_ptr<GPT>> models;
  std::vector<std::vector<ChatRlStep>> steps;
};

SoloAndRanks run_solo_and_ranks(ChatRlOptions o, const tasks::Task& train, const tasks::Task& val, int W,
                                const FaultInjector* faults) {
  SoloAndRanks out;
  out.solo_model = tiny_model(3);
  LocalCommunicator solo;
  ChatRlCallbacks cb;
  cb.on_step = [&](const ChatRlStep& s) { out.solo_steps.push_back(s); };
  run_chat_rl(*out.solo_model, byte_tok(), train, val, o, solo, cb);
  o.faults = faults;
  nanochat::testing::ThreadHub hub(W);
  out.models.resize(static_cast<size_t>(W));
  out.steps.resize(static_cast<size_t>(W));
  for (auto& m : out.models) m = tiny_model(3);
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      nanochat::testing::ThreadCommunicator comm(hub, r);
      ChatRlCallbacks c;
      c.on_step = [&, r](const ChatRlStep& s) { out.steps[static_cast<size_t>(r)].push_back(s); };
      run_chat_rl(*out.models[static_cast<size_t>(r)], byte_tok(), train, val, o, comm, c);
    });
  for (auto& t : th) t.join();
  return out;
}

// The ranks' runs equal the one rank's: the same rewards and sequence lengths every step, every
// rank the same weights, and those within the summation-order noise of the one rank's. The
// gradients are summed in another order (per rank, then over ranks), and AdamW and Muon normalise
// them, so rounding-level differences of small gradients become visible next to the weights:
// compare each tensor's difference with the size of its update over the run. (Three layers: with
// two, backout_lambda's gradient is zero up to rounding, all of its update noise.)
void expect_ranks_equal_solo(const SoloAndRanks& x) {
  for (size_t r = 0; r < x.steps.size(); ++r) {
    ASSERT_EQ(x.steps[r].size(), x.solo_steps.size()) << "rank " << r;
    for (size_t i = 0; i < x.solo_steps.size(); ++i) {
      EXPECT_NEAR(x.steps[r][i].mean_reward, x.solo_steps[i].mean_reward, 1e-12) << "rank " << r << " step " << i;
      EXPECT_NEAR(x.steps[r][i].mean_sequence_length, x.solo_steps[i].mean_sequence_length, 1e-12);
      EXPECT_EQ(x.steps[r][i].split, x.steps[0][i].split) << "every rank derives the same split";
    }
  }
  auto fresh = tiny_model(3);
  int moved = 0;
  for (const ParamInfo& p : x.solo_model->params()) {
    const float* a = x.solo_model->param(p.name);
    const float* init = fresh->param(p.name);
    double update = 0, err = 0;
    for (size_t i = 0; i < p.numel; ++i) {
      update = std::max(update, std::fabs(static_cast<double>(a[i]) - init[i]));
      err = std::max(err, std::fabs(static_cast<double>(a[i]) - x.models[0]->param(p.name)[i]));
      for (size_t r = 1; r < x.models.size(); ++r)
        ASSERT_EQ(x.models[0]->param(p.name)[i], x.models[r]->param(p.name)[i])
            << p.name << " differs between ranks 0 and " << r << " at " << i;
    }
    EXPECT_LE(err, 2e-2 * update + 1e-7) << p.name << " (largest update " << update << ")";
    moved += update > 0;
  }
  EXPECT_GT(moved, 5);
}

// Rank 1 is `factor` times slower: it sleeps after each example (checkpoint/faults.h).
class SlowRank : public FaultInjector {
 public:
  SlowRank(int rank, double factor) : rank_(rank), factor_(factor) {}
  void after_micro_batch(int rank, double seconds) const override {
    if (rank == rank_) std::this_thread::sleep_for(std::chrono::duration<double>((factor_ - 1) * seconds));
  }

 private:
  int rank_;
  double factor_;
};

ChatRlOptions small_rl(int examples_per_step, int64_t steps) {
  ChatRlOptions o;
  o.rollout.num_samples = 4;
  o.rollout.device_batch_size = 2;
  o.rollout.max_new_tokens = 3;
  o.examples_per_step = examples_per_step;
  o.num_steps = steps;
  o.init_lr_frac = 0.5f;
  o.eval_every = 0;
  return o;
}

// Two ranks share the examples of a step (the first step evenly: rank 0 examples 0, 1; rank 1
// examples 2, 3) and sum their gradients; a rollout's seed depends on the step and the example
// only, so one rank doing all four examples samples the same answers.
TEST(ChatRl, TwoRanksEqualOneRank) {
  FirstLetterTask train(16), val(2);
  const SoloAndRanks x = run_solo_and_ranks(small_rl(4, 2), train, val, 2, nullptr);
  ASSERT_EQ(x.solo_steps.size(), 2u);
  EXPECT_EQ(x.steps[0][0].split, (std::vector<int64_t>{2, 2}));
  EXPECT_GT(x.solo_steps[0].mean_reward + x.solo_steps[1].mean_reward, 0.0);  // some advantage is nonzero
  expect_ranks_equal_solo(x);
}

// A rank 4x slower gets fewer of a step's examples once measured (dealt by speed), an odd
// examples-per-step is fine at two ranks, and the run still equals one rank's.
TEST(ChatRl, ASlowerRankGetsFewerExamplesAndTheRunStillEqualsOneRank) {
  FirstLetterTask train(32), val(2);
  const SlowRank slow(1, 4.0);
  const SoloAndRanks x = run_solo_and_ranks(small_rl(7, 5), train, val, 2, &slow);
  ASSERT_EQ(x.steps[0].size(), 5u);
  EXPECT_EQ(x.steps[0][0].split, (std::vector<int64_t>{4, 3})) << "the first step is dealt evenly";
  for (const ChatRlStep& s : x.steps[0]) EXPECT_EQ(s.split[0] + s.split[1], 7);
  // a few steps of measurements (each example takes milliseconds here, so one step is noisy)
  EXPECT_GE(x.steps[0][4].split[0], 5) << "the 4x slower rank 1 should get at most 2 of 7, got "
                                       << x.steps[0][4].split[0] << "/" << x.steps[0][4].split[1];
  expect_ranks_equal_solo(x);
}

TEST(ChatRl, BadSettingsAreNamed) {
  auto model = tiny_model();
  FirstLetterTask train(8), val(2);
  LocalCommunicator comm;
  ChatRlOptions o;
  o.examples_per_step = 16;
  EXPECT_NE(nctest::error_of([&] {
              run_chat_rl(*model, byte_tok(), train, val, o, comm);
            }).find("FirstLetter has 8 examples: fewer than --examples-per-step (16)"),
            std::string::npos);
  o.examples_per_step = 4;
  o.rollout.num_samples = 12;
  EXPECT_NE(nctest::error_of([&] {
              run_chat_rl(*model, byte_tok(), train, val, o, comm);
            }).find("--num-samples (12) must be a positive multiple of --device-batch-size (8)"),
            std::string::npos);
  RlRollout r;
  r.sequences = {{1}};
  r.masks = {{0}};
  r.advantages = {1.0};
  EXPECT_NE(nctest::error_of([&] { policy_gradient_backward(*model, r, 0, 1, 1); }).find("needs >= 2 tokens"),
            std::string::npos);
  EXPECT_NE(nctest::error_of([&] { policy_gradient_backward(*model, r, 0, 2, 1); }).find("not a non-empty range"),
            std::string::npos);
}

}  // namespace
}  // namespace nanochat
