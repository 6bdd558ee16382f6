#include "nanochat/plan/plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nanochat/core/error.h"

using namespace nanochat;

// Worked counts of docs/nanochat.md 1.9 (vocab 32768).
TEST(Plan, CountsMatchNanochatTable) {
  struct Row {
    int depth, head_dim, seq;
    const char* pattern;
    int64_t total, matmul, flops, tm, ve;
  };
  const Row rows[] = {
      {6, 64, 512, "L", 73531646, 23199984, 153355680, 10617048, 37748736},
      {12, 128, 2048, "SSSL", 286261730, 110100936, 759696048, 84935088, 150994944},
      {20, 128, 2048, "SSSL", 896533746, 435160264, 2886212784, 393217200, 419430400},
      {24, 128, 2048, "SSSL", 1384122122, 729810648, 4775225616, 679478976, 603979776},
  };
  for (auto& r : rows) {
    auto cfg = ModelConfig::from_depth(r.depth, 64, r.head_dim, r.seq, 32768, r.pattern);
    auto c = count_params(cfg);
    EXPECT_EQ(c.total, r.total) << "depth " << r.depth;
    EXPECT_EQ(c.matmul, r.matmul) << "depth " << r.depth;
    EXPECT_EQ(c.flops_per_token, r.flops) << "depth " << r.depth;
    EXPECT_EQ(c.transformer_matrices, r.tm) << "depth " << r.depth;
    EXPECT_EQ(c.value_embeds, r.ve) << "depth " << r.depth;
  }
}

// nanochat's runs/runcpu.sh base_train settings (depth 6, head_dim 64, window L, T 512, device
// batch 32, total batch 16384, 5000 iterations).
static BaseTrainArgs runcpu_args() {
  BaseTrainArgs a;
  a.depth = 6;
  a.head_dim = 64;
  a.window_pattern = "L";
  a.max_seq_len = 512;
  a.device_batch_size = 32;
  a.total_batch_size = 16384;
  a.num_iterations = 5000;
  return a;
}

// runcpu.sh derivations (docs/nanochat.md 3.2): bls 0.1767767, wd_scaled 0.2349029, 1 micro-step at W=1.
TEST(Plan, RuncpuDerivations) {
  BaseTrainArgs a = runcpu_args();
  auto p = derive_plan(a, 32768, 1);
  EXPECT_EQ(p.target_tokens, 278399520);
  EXPECT_NEAR(p.d_ref, 1321216128.0, 1.0);
  EXPECT_NEAR(p.batch_lr_scale, 0.1767767, 1e-7);
  EXPECT_NEAR(p.weight_decay_scaled, 0.2349029, 1e-7);
  EXPECT_EQ(p.num_iterations, 5000);
  EXPECT_EQ(p.grad_accum_steps, 1);
}

// d12 defaults: auto batch 524288, 2520 steps, wd unchanged (docs/nanochat.md 3.2).
TEST(Plan, D12DefaultsAutoBatchAndHorizon) {
  BaseTrainArgs a;
  a.depth = 12;
  a.device_batch_size = 32;
  auto p = derive_plan(a, 32768, 8);
  EXPECT_TRUE(p.auto_batch);
  EXPECT_EQ(p.total_batch_size, 524288);
  EXPECT_EQ(p.num_iterations, 2520);
  EXPECT_NEAR(p.weight_decay_scaled, 0.28, 1e-12);
  EXPECT_EQ(p.grad_accum_steps, 1);
}

// speedrun d24 ratio 8: target 5,838,484,992 tokens, tbs 1,048,576, 5568 steps, wd 0.0597384.
TEST(Plan, SpeedrunD24) {
  BaseTrainArgs a;
  a.depth = 24;
  a.target_param_data_ratio = 8;
  a.device_batch_size = 16;
  auto p = derive_plan(a, 32768, 8);
  EXPECT_EQ(p.target_tokens, 5838484992LL);
  EXPECT_EQ(p.total_batch_size, 1048576);
  EXPECT_EQ(p.num_iterations, 5568);
  EXPECT_NEAR(p.batch_lr_scale, 1.414214, 1e-6);
  EXPECT_NEAR(p.weight_decay_scaled, 0.0597384, 1e-7);
  EXPECT_EQ(p.grad_accum_steps, 4);
}

// A total batch that is not a whole number of micro-batches names the nearest valid settings.
TEST(Plan, IndivisibleBatchNamesNearestValidSettings) {
  BaseTrainArgs a;
  a.depth = 6;
  a.head_dim = 64;
  a.window_pattern = std::string(1, 'L');  // (GCC 12 -O3 warns falsely -Wrestrict on = "L" here)
  a.max_seq_len = 512;
  a.device_batch_size = 24;
  a.total_batch_size = 16384;
  a.num_iterations = 10;
  try {
    derive_plan(a, 32768, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("--total-batch-size 12288 or 24576"), std::string::npos) << m;
    EXPECT_NE(m.find("--device-batch-size 16"), std::string::npos) << m;
  }
}

// runcpu's settings at W=2 break nanochat's divisibility assert (total % (B*T*W)); here the ranks
// share the step's micro-batches by speed, so only whole micro-batches are needed.
TEST(Plan, MicroBatchesNeedNotDivideAmongTheRanks) {
  BaseTrainArgs a;
  a.depth = 6;
  a.head_dim = 64;
  a.window_pattern.assign(1, 'L');  // not = "L": GCC 12 warns falsely (-Wrestrict, its bug 105329)
  a.max_seq_len = 512;
  a.device_batch_size = 32;
  a.total_batch_size = 16384;
  a.num_iterations = 10;
  const auto p = derive_plan(a, 32768, 2);
  EXPECT_EQ(p.grad_accum_steps, 1);
  EXPECT_EQ(p.log.back(), "Total batch size 16,384 => 1 micro-batches per step, dealt to the 2 ranks by their speed");
}

TEST(Plan, NoHorizonIsAClearError) {
  BaseTrainArgs a;
  a.depth = 2;
  a.target_param_data_ratio = -1;
  a.total_batch_size = 2048;
  a.max_seq_len = 64;
  a.device_batch_size = 32;
  EXPECT_THROW(derive_plan(a, 256, 1), Error);
}

// runcpu.sh settings: the plan holds every derived setting the trainer uses.
TEST(Plan, OwnsTheOptimizerScheduleEvalAndFolders) {
  BaseTrainArgs a = runcpu_args();
  a.eval_tokens = 100000;
  a.warmup_steps = 7;
  a.warmdown_ratio = 0.5;
  a.final_lr_frac = 0.1;
  const auto p = derive_plan(a, 32768, 1, "/base");
  EXPECT_EQ(p.B, 32);
  EXPECT_EQ(p.T, 512);
  EXPECT_EQ(p.eval_steps_for(p.B), 100000 / (32 * 512));
  const double bls = 0.1767767;
  EXPECT_NEAR(p.optim.embedding_lr, 0.3 * bls, 1e-7);
  EXPECT_NEAR(p.optim.unembedding_lr, 0.008 * bls, 1e-8);
  EXPECT_NEAR(p.optim.matrix_lr, 0.02 * bls, 1e-8);
  EXPECT_NEAR(p.optim.scalar_lr, 0.5 * bls, 1e-7);
  EXPECT_EQ(p.optim.embedding_lr, static_cast<float>(a.embedding_lr * p.batch_lr_scale));
  EXPECT_EQ(p.optim.weight_decay, static_cast<float>(p.weight_decay_scaled));
  EXPECT_EQ(p.optim.model_dim, 384);
  EXPECT_NEAR(p.dmodel_lr_scale, std::sqrt(2.0), 1e-12);  // (384 / 768)^-0.5
  EXPECT_EQ(p.dmodel_lr_scale_line(),
            "Scaling the LR for the AdamW parameters proportional to 1/sqrt(384/768) = 1.41421");
  EXPECT_EQ(p.schedule.num_iterations, 5000);
  EXPECT_EQ(p.schedule.warmup_steps, 7);
  EXPECT_EQ(p.schedule.warmdown_ratio, 0.5);
  EXPECT_EQ(p.schedule.final_lr_frac, 0.1);
  EXPECT_EQ(p.tag, "d6");
  EXPECT_EQ(p.checkpoint_dir, "/base/base_checkpoints/d6");
  a.model_tag = "mine";
  a.eval_tokens = 10;  // less than one batch: still one eval step
  const auto q = derive_plan(a, 32768, 1, "/base");
  EXPECT_EQ(q.tag, "mine");
  EXPECT_EQ(q.checkpoint_dir, "/base/base_checkpoints/mine");
  EXPECT_EQ(q.eval_steps_for(q.B), 1);
}

// --sync diloco's settings: an overlap of K steps must end before the next boundary (K < H).
TEST(Plan, DilocoOverlapMustBeShorterThanARound) {
  BaseTrainArgs a;
  a.depth = 2;
  a.num_iterations = 20;
  a.total_batch_size = 2048;
  a.max_seq_len = 64;
  a.device_batch_size = 32;
  a.sync = "diloco";
  a.sync_every = 5;
  a.outer_overlap = 4;
  EXPECT_EQ(derive_plan(a, 256, 1).outer.overlap_steps, 4);
  for (int64_t k : {5, -1}) {
    a.outer_overlap = k;
    try {
      derive_plan(a, 256, 1);
      ADD_FAILURE() << "--outer-overlap " << k << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--outer-overlap must be at least 0 and less than --sync-every (5)"),
                std::string::npos)
          << e.what();
    }
  }
}
