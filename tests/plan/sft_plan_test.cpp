// chat-sft's plan (plan/sft_plan.h) and the step schedule each command's plan chooses: the values
// inherited from the base checkpoint as nanochat's chat_sft.py resolves them, and the schedule
// functions against the formulas of plan/schedules.h evaluated by hand.
#include "nanochat/plan/sft_plan.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "nanochat/core/error.h"
#include "nanochat/plan/plan.h"

using namespace nanochat;

namespace {

// A base checkpoint of a small model that recorded its batch and its lrs.
SftBase small_base() {
  SftBase b;
  b.model_config = ModelConfig::from_depth(4, 64, 64, 256, 512, "L");
  b.max_seq_len = 256;
  b.device_batch_size = 4;
  b.total_batch_size = 4096;
  b.user_config = {{"embedding_lr", 0.25}, {"unembedding_lr", 0.008}, {"matrix_lr", 0.02}};
  b.meta_path = "base/meta_000100.json";
  return b;
}

bool has_line(const TrainPlan& p, const std::string& line) {
  for (const std::string& l : p.log)
    if (l == line) return true;
  return false;
}

}  // namespace

TEST(SftPlan, InheritsTheBaseRunsBatchAndLrsAndEndsWithTheData) {
  SftArgs a;
  a.matrix_lr = 0.01;  // given: overrides the base run's 0.02
  const TrainPlan p = derive_sft_plan(a, small_base(), 2, "/tmp/base");
  EXPECT_EQ(p.command, "chat-sft");
  EXPECT_EQ(p.T, 256);
  EXPECT_EQ(p.B, 4);
  EXPECT_EQ(p.total_batch_size, 4096);
  EXPECT_EQ(p.rows_per_step(), 16);
  EXPECT_FLOAT_EQ(p.optim.embedding_lr, 0.25f);
  EXPECT_FLOAT_EQ(p.optim.unembedding_lr, 0.008f);
  EXPECT_FLOAT_EQ(p.optim.matrix_lr, 0.01f);
  EXPECT_TRUE(has_line(p, "Inherited max_seq_len=256 from pretrained checkpoint")) << p.log.front();
  EXPECT_TRUE(has_line(p, "Inherited embedding_lr=0.25 from pretrained checkpoint"));
  EXPECT_TRUE(has_line(p, "NOTE: --matrix-lr=0.01 overrides pretrained value of 0.02"));
  EXPECT_EQ(p.run_end, RunEnd::Stream);
  EXPECT_EQ(p.num_iterations, std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(p.meta_sequence_len_is_T);
  EXPECT_EQ(p.data, DataSource::Served);
  EXPECT_EQ(p.checkpoint_dir, "/tmp/base/chatsft_checkpoints/d4");
}

TEST(SftPlan, ABatchOfPartRowsNamesTheFlag) {
  SftArgs a;
  a.total_batch_size = 1000;  // not a multiple of T = 256
  try {
    derive_sft_plan(a, small_base(), 1, ".");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--total-batch-size 1000 is not a multiple of --max-seq-len 256"),
              std::string::npos)
        << e.what();
  }
}

TEST(StepScheduleFn, ChatSftsFollowsTheProgressWithAFixedWeightDecay) {
  SftArgs a;
  a.warmup_ratio = 0.1;
  a.warmdown_ratio = 0.4;
  a.final_lr_frac = 0.2;
  const SftSchedule lr{0.1, 0.4, 0.2};
  const TrainPlan p = derive_sft_plan(a, small_base(), 1, ".");
  for (const double progress : {0.0, 0.05, 0.5, 0.8, 1.0}) {
    const ScheduledStep s = p.step_schedule(7, progress);
    EXPECT_EQ(s.lrm, lr.lr_multiplier(progress)) << progress;
    EXPECT_EQ(s.optim.lr_multiplier, static_cast<float>(lr.lr_multiplier(progress)));
    EXPECT_EQ(s.optim.muon_momentum, static_cast<float>(SftSchedule::muon_momentum(7)));
    EXPECT_EQ(s.optim.muon_weight_decay, 0.f) << "a fresh optimizer's";
  }
  const ScheduledStep loaded = sft_step_schedule(a, 0.125)(400, 0.3);  // the base run's last decay
  EXPECT_EQ(loaded.optim.muon_weight_decay, 0.125f);
  EXPECT_EQ(loaded.optim.muon_momentum, 0.95f);
  EXPECT_EQ(loaded.lrm, 1.0);
}

TEST(StepScheduleFn, BaseTrainsFollowsTheStepAndIgnoresTheProgress) {
  BaseTrainArgs a;
  a.depth = 4;
  a.max_seq_len = 256;
  a.device_batch_size = 4;
  a.total_batch_size = 4096;
  a.num_iterations = 1000;
  const TrainPlan p = derive_plan(a, 512, 1);
  EXPECT_EQ(p.run_end, RunEnd::Steps);
  EXPECT_FALSE(p.meta_sequence_len_is_T);
  for (const int64_t it : {0, 39, 400, 500, 999}) {
    const ScheduledStep s = p.step_schedule(it, 0.9);
    EXPECT_EQ(s.lrm, p.schedule.lr_multiplier(it)) << it;
    EXPECT_EQ(s.optim.lr_multiplier, static_cast<float>(p.schedule.lr_multiplier(it)));
    EXPECT_EQ(s.optim.muon_momentum, static_cast<float>(p.schedule.muon_momentum(it)));
    EXPECT_EQ(s.optim.muon_weight_decay, static_cast<float>(p.schedule.muon_weight_decay(it, p.weight_decay_scaled)));
    EXPECT_EQ(p.step_schedule(it, 0.0).lrm, s.lrm);
  }
}
