// chat-sft's schedules and log line against nanochat scripts/chat_sft.py's formulas, worked by hand:
// get_lr_multiplier(progress), get_muon_momentum(it) and the step's print0 f-string; the end of
// run's line on the packing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "nanochat/plan/schedules.h"
#include "nanochat/train/report.h"
#include "nanochat/train/sft_data.h"

using namespace nanochat;

TEST(SftSchedule, LrMultiplierFollowsTheProgress) {
  const SftSchedule def;  // nanochat's defaults: no warmup, warmdown over the last half, to 0
  EXPECT_DOUBLE_EQ(def.lr_multiplier(0.0), 1.0);
  EXPECT_DOUBLE_EQ(def.lr_multiplier(0.5), 1.0);
  EXPECT_DOUBLE_EQ(def.lr_multiplier(0.75), 0.5);  // decay (0.75 - 0.5) / 0.5 = 0.5
  EXPECT_DOUBLE_EQ(def.lr_multiplier(1.0), 0.0);
  EXPECT_NEAR(def.lr_multiplier(1.1), -0.2, 1e-15);  // nanochat's formula goes on past the end
  const SftSchedule s{0.1, 0.4, 0.2};
  EXPECT_DOUBLE_EQ(s.lr_multiplier(0.05), (0.05 + 1e-8) / 0.1);
  EXPECT_DOUBLE_EQ(s.lr_multiplier(0.1), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_multiplier(0.6), 1.0);
  EXPECT_NEAR(s.lr_multiplier(0.8), 0.5 * 1.0 + 0.5 * 0.2, 1e-15);  // decay (0.8 - 0.6) / 0.4
  EXPECT_NEAR(s.lr_multiplier(1.0), 0.2, 1e-15);
}

TEST(SftSchedule, MuonMomentumRisesOver300Steps) {
  EXPECT_DOUBLE_EQ(SftSchedule::muon_momentum(0), 0.85);
  EXPECT_NEAR(SftSchedule::muon_momentum(150), 0.90, 1e-15);
  EXPECT_NEAR(SftSchedule::muon_momentum(300), 0.95, 1e-15);
  EXPECT_NEAR(SftSchedule::muon_momentum(1000), 0.95, 1e-15);
}

TEST(SftSchedule, LogLineIsNanochats) {
  StepReport r;
  r.step = 5;  // the step just made: nanochat prints it after counting it
  r.progress = 0.1234;
  r.smooth_loss = 2.5;
  r.lrm = 0.8;
  r.dt = 0.25;
  r.tok_per_sec = 12345;
  r.mfu = 1.5;
  r.loader_state = {{"epoch", 2}};
  r.total_training_time = 90;
  EXPECT_EQ(sft_step_log_line(r),
            "step 00006 (12.34%) | loss: 2.500000 | lrm: 0.80 | dt: 250.00ms | tok/sec: 12,345 | mfu: 1.50 | "
            "epoch: 2 | total time: 1.50m");
  r.world_size = 2;
  r.comm_wait = 0.05;
  r.ranks = {{0.5, 0.1, 0.05, 1000}, {0.5, 0.12, 0.03, 900}};
  EXPECT_EQ(sft_step_log_line(r),
            "step 00006 (12.34%) | loss: 2.500000 | lrm: 0.80 | dt: 250.00ms | tok/sec: 12,345 | mfu: 1.50 | "
            "epoch: 2 | total time: 1.50m | comm wait: 20.0% | ranks: r0 50% 0.10s+0.05s 1,000 tok/s, r1 50% "
            "0.12s+0.03s 900 tok/s");
}

// The packed and the rendered conversations are told apart: the rendered ones still in the packing
// buffer at the end were never trained, and the cut renders are counted among all renders.
TEST(SftSchedule, PackingLineSaysWhatEachCountIs) {
  const nlohmann::json packer = {
      {"consumed", 3842}, {"epoch", 1}, {"rendered", 3942}, {"truncated", 0}, {"buffer", std::vector<int>(100, 0)}};
  EXPECT_EQ(sft_packing_summary(packer, 2049),
            "Conversations packed into rows: 3842 (epoch 1); rendered: 3942 (the 3842 packed and 100 still in the "
            "packing buffer at the end); renders longer than a row of 2049 tokens and cut to it: 0 of the 3942");
  EXPECT_EQ(sft_packing_summary(nlohmann::json::object(), 65),
            "Conversations packed into rows: 0 (epoch 1); rendered: 0 (the 0 packed and 0 still in the packing "
            "buffer at the end); renders longer than a row of 65 tokens and cut to it: 0 of the 0");
}
