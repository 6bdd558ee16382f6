// save_checkpoint -> resume at world sizes 1, 2 and 3 with the in-process thread communicator:
// the weights, the loop state, each rank's loader state and the whole optimizer state come back
// equal; a rank missing its shard makes every rank throw the same error.
#include "nanochat/checkpoint/loop_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/core/rng.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"
#include "support/thread_communicator.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace nanochat;
using nanochat::testing::ThreadCommunicator;
using nanochat::testing::ThreadHub;

namespace {

// A folder of its own per test (ctest runs the tests of this file in parallel processes).
std::string test_base() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return (fs::temp_directory_path() / str_cat("nc_loop_checkpoint_", info->name())).string();
}

TrainPlan plan_for(int W, const std::string& tag, int64_t total_batch_size = 192) {
  BaseTrainArgs a;
  a.depth = 2;
  a.aspect_ratio = 32;
  a.head_dim = 32;
  a.max_seq_len = 32;
  a.window_pattern = std::string(1, 'L');  // not = "L": GCC 12 warns -Wrestrict on that (a false positive)
  a.device_batch_size = 1;
  a.total_batch_size = total_batch_size;
  a.num_iterations = 5;
  a.model_tag = tag;
  return derive_plan(a, 256, W, test_base());
}

std::vector<OptParam> opt_params(GPT& m) {
  std::vector<OptParam> ops;
  for (const auto& p : m.params())
    ops.push_back({p.name, p.shape, m.param_data() + p.offset, m.grad_data() + p.offset});
  return ops;
}

// Runs fn(comm, rank) on W threads; rethrows the first rank's failure.
void on_ranks(int W, const std::function<void(Communicator&, int)>& fn) {
  ThreadHub hub(W);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(W));
  std::vector<std::thread> th;
  for (int r = 0; r < W; ++r)
    th.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(hub, r);
        fn(comm, r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

LoopState sample_state(int rank) {
  LoopState s;
  s.step = 2;
  s.val_bpb = 1.25;
  s.min_val_bpb = 1.125;
  s.smooth_train_loss = 3.5;
  s.total_training_time = 7.75;
  s.loader_state = json{{"rank_of_saver", rank}};
  return s;
}

MuonAdamW::WholeState whole_state(const TrainPlan& plan, const std::string& dir, int W) {
  GPT m(plan.model);
  MuonAdamW opt(opt_params(m), plan.optim);
  std::vector<StFile> shards;
  for (int r = 0; r < W; ++r) shards.push_back(load_safetensors(CheckpointPaths{dir, 2}.optim(r)));
  return opt.assemble_whole_state(shards);
}

// Phase A: W0 ranks take two optimizer steps with the same gradients and save step 2.
std::vector<float> train_and_save(const TrainPlan& plan, int W0) {
  std::vector<float> weights;
  on_ranks(W0, [&](Communicator& comm, int r) {
    GPT m(plan.model);
    m.init_weights(7);
    MuonAdamW opt(opt_params(m), plan.optim, &comm);
    Rng rng(11);
    for (int s = 0; s < 2; ++s) {
      for (size_t i = 0; i < m.num_params(); ++i) m.grad_data()[i] = static_cast<float>(rng.uniform() - 0.5);
      opt.step(1.f, 0.9f, 0.f, 1.f / static_cast<float>(W0));
    }
    json run_meta{{"model_config", plan.model.to_json()},
                  {"data_stream", "one-rank"},
                  {"device_batch_size", plan.B},
                  {"total_batch_size", plan.total_batch_size},
                  {"world_size", W0}};
    save_checkpoint(comm, plan.checkpoint_dir, m, opt, RunMeta::from_json(run_meta, "run meta"), sample_state(r));
    if (r == 0) weights.assign(m.param_data(), m.param_data() + m.num_params());
  });
  return weights;
}

}  // namespace

TEST(LoopCheckpoint, SaveThenResumeAtWorldSizes123GivesTheSameState) {
  fs::remove_all(test_base());
  for (int W0 = 1; W0 <= 3; ++W0) {
    const std::string tag = str_cat("a", W0);
    const TrainPlan plan0 = plan_for(W0, tag);
    const std::vector<float> weights = train_and_save(plan0, W0);
    const auto whole0 = whole_state(plan0, plan0.checkpoint_dir, W0);
    for (int W1 = 1; W1 <= 3; ++W1) {
      SCOPED_TRACE(str_cat("W ", W0, " -> ", W1));
      TrainPlan plan1 = plan_for(W1, tag);
      const std::string again = str_cat(test_base(), "/again_", W0, W1);
      on_ranks(W1, [&](Communicator& comm, int r) {
        GPT m(plan1.model);
        m.init_weights(99);  // other weights: resume must replace them
        MuonAdamW opt(opt_params(m), plan1.optim, &comm);
        const LoopState st = resume(comm, plan1, 2, m, opt);
        const LoopState want = sample_state(W0 == W1 ? r : 0);  // one-rank stream: rank 0's state carries over
        EXPECT_EQ(st.step, want.step);
        EXPECT_EQ(st.val_bpb, want.val_bpb);
        EXPECT_EQ(st.min_val_bpb, want.min_val_bpb);
        EXPECT_EQ(st.smooth_train_loss, want.smooth_train_loss);
        EXPECT_EQ(st.total_training_time, want.total_training_time);
        EXPECT_EQ(st.loader_state, want.loader_state) << "rank " << r;
        EXPECT_EQ(std::vector<float>(m.param_data(), m.param_data() + m.num_params()), weights) << "rank " << r;
        json run_meta{{"model_config", plan1.model.to_json()}, {"world_size", W1}};
        save_checkpoint(comm, again, m, opt, RunMeta::from_json(run_meta, "run meta"), st);
      });
      const auto whole1 = whole_state(plan1, again, W1);
      EXPECT_EQ(whole1.values, whole0.values);
      EXPECT_EQ(whole1.steps, whole0.steps);
    }
  }
  fs::remove_all(test_base());
}

TEST(LoopCheckpoint, ARankWithoutItsShardStopsEveryRankWithTheSameError) {
  fs::remove_all(test_base());
  const TrainPlan plan = plan_for(2, "missing");
  train_and_save(plan, 2);
  fs::remove(CheckpointPaths{plan.checkpoint_dir, 2}.optim(1));
  std::vector<std::string> messages(2);
  on_ranks(2, [&](Communicator& comm, int r) {
    GPT m(plan.model);
    MuonAdamW opt(opt_params(m), plan.optim, &comm);
    try {
      resume(comm, plan, 2, m, opt);
    } catch (const Error& e) {
      messages[static_cast<size_t>(r)] = e.what();
    }
  });
  EXPECT_NE(messages[0].find("rank 1"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("optim_000002_rank1"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[0], messages[1]);
  fs::remove_all(test_base());
}

TEST(LoopCheckpoint, ResumeRejectsAnotherBatch) {
  fs::remove_all(test_base());
  const TrainPlan plan = plan_for(1, "batch");
  train_and_save(plan, 1);
  const TrainPlan other = plan_for(1, "batch", 96);
  GPT m(other.model);
  MuonAdamW opt(opt_params(m), other.optim);
  ThreadHub hub(1);
  ThreadCommunicator comm(hub, 0);
  try {
    resume(comm, other, 2, m, opt);
    FAIL() << "resumed with another --total-batch-size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--total-batch-size 192"), std::string::npos) << e.what();
  }
  fs::remove_all(test_base());
}

// A checkpoint of an earlier version, whose nodes each kept their own folder (rank 0: weights,
// meta, its shard, the marker; rank 1: its shard, the marker), still resumes at its world size:
// each rank reads its own shard and loader state, and the whole optimizer state comes back.
TEST(LoopCheckpoint, AnEarlierPerNodeCheckpointStillResumesAtItsWorldSize) {
  fs::remove_all(test_base());
  const TrainPlan plan = plan_for(2, "pernode");
  const std::vector<float> weights = train_and_save(plan, 2);
  const auto whole0 = whole_state(plan, plan.checkpoint_dir, 2);
  const CheckpointPaths cp{plan.checkpoint_dir, 2};
  const std::string node1 = test_base() + "/node1";
  fs::create_directories(node1);
  const CheckpointPaths cp1{node1, 2};
  fs::rename(cp.optim(1), cp1.optim(1));
  fs::copy_file(cp.marker(), cp1.marker());
  const std::string again = test_base() + "/again";
  on_ranks(2, [&](Communicator& comm, int r) {
    TrainPlan mine = plan;
    if (r == 1) mine.checkpoint_dir = node1;
    GPT m(mine.model);
    m.init_weights(99);
    MuonAdamW opt(opt_params(m), mine.optim, &comm);
    const LoopState st = resume(comm, mine, 2, m, opt);
    EXPECT_EQ(st.loader_state, sample_state(r).loader_state) << "rank " << r;
    EXPECT_EQ(std::vector<float>(m.param_data(), m.param_data() + m.num_params()), weights) << "rank " << r;
    save_checkpoint(comm, again, m, opt,
                    RunMeta::from_json(json{{"model_config", mine.model.to_json()}, {"world_size", 2}}, "run meta"),
                    st);
  });
  const auto whole1 = whole_state(plan, again, 2);
  EXPECT_EQ(whole1.values, whole0.values);
  EXPECT_EQ(whole1.steps, whole0.steps);
  fs::remove_all(test_base());
}
