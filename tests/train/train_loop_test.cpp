// The real training loop (train/train_loop.h TrainLoop) on one process: a Zero2Sync over a
// LocalCommunicator built by make_step_sync, rows from memory, a tiny GPT. Independent truth:
//  * the same sync driven by hand as step_sync_test.cpp drives it, with the schedule computed from
//    the plan's LrSchedule: the loop's logged losses and LR multipliers, and its final weights,
//    are those of the hand-driven steps;
//  * a sync whose ranks are one model only at even steps (and the last): the loop evaluates,
//    checks the replicas and saves at those steps only, and the val rows are read at those
//    boundaries;
//  * a stream that ends the run (chat-sft's RunEnd::Stream): the loop stops where the rows say,
//    names the steps as its StepLog says and takes the LR from the stream's progress;
//  * a membership that admits ranks: the loop saves the boundary and ends with its exception.
#include "nanochat/train/train_loop.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/rng.h"
#include "nanochat/model/gpt.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/sync_factory.h"
#include "support/byte_tokenizer.h"
#include "support/tiny_gpt.h"

using namespace nanochat;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int T = 8, B = 2, R = 4, kSteps = 5, kEvalSteps = 2;

// A fresh folder for the run's checkpoints and metrics, removed at the end.
using nctest::TempDir;

ModelConfig tiny() { return nctest::tiny_gpt_config(); }  // T 8, vocab 40

TrainPlan make_plan(const std::string& dir) {
  TrainPlan p;
  p.model = tiny();
  p.world_size = 1;
  p.B = B;
  p.T = T;
  p.total_batch_size = R * T;
  p.num_iterations = kSteps;
  p.optim.weight_decay = 0;
  p.optim.model_dim = 32;
  p.schedule = LrSchedule{kSteps, 2, 0.6, 0.1};
  p.step_schedule = base_train_schedule(p.schedule, 0.0);
  // evaluate every step, no samples, save every step, compare the replicas every step
  p.cadence = Cadence{1, -1, 1, 1, -1, 0};
  p.tag = "t";
  p.checkpoint_dir = dir;
  return p;
}

JobLayout make_layout() {
  JobLayout l;
  l.device_batches = {B};
  l.rows_per_step = R;
  l.eval_B = B;
  l.eval_steps = kEvalSteps;
  return l;
}

// The rows of `steps` steps (R rows of T+1 tokens each) and the val rows.
std::vector<StepRows> make_steps(int steps) {
  Rng rng(31);
  std::vector<StepRows> out(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    StepRows& r = out[static_cast<size_t>(s)];
    r.step = s;
    r.rows.resize(static_cast<size_t>(R) * (T + 1));
    for (int32_t& v : r.rows) v = static_cast<int32_t>(rng.below(40));
    r.loader_state = json{{"next_step", s + 1}};
  }
  return out;
}

std::vector<int32_t> make_val() {
  Rng rng(32);
  std::vector<int32_t> v(static_cast<size_t>(kEvalSteps) * B * (T + 1));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.below(40));
  return v;
}

// A StepSource over rows in memory that records what the loop asked for.
class RowsInMemory final : public StepSource {
 public:
  explicit RowsInMemory(std::vector<StepRows> steps) : steps_(std::move(steps)), val_(make_val()) {}
  StepRows next(int64_t step) override {
    fetched.push_back(step);
    return steps_.at(static_cast<size_t>(step));
  }
  const json& initial_state() const override { return initial_; }
  ValBatchReader val_reader(int b) override {
    val_read_after.push_back(static_cast<int64_t>(fetched.size()));  // the steps read before this evaluation
    return [this, b](int64_t index, int32_t* x, int32_t* y) {
      if (x == nullptr) return;
      split_rows(val_.data() + static_cast<size_t>(index) * b * (T + 1), b, T, x, y);
    };
  }
  std::vector<int64_t> fetched;         // next()'s steps, in order
  std::vector<int64_t> val_read_after;  // per evaluation: the steps read before it

 private:
  std::vector<StepRows> steps_;
  std::vector<int32_t> val_;
  json initial_ = json{{"next_step", 0}};
};

// The StepSync a test wraps: every call goes to `inner`, except that the ranks are one model only
// at the steps `one_model` says; it records where the loop compared, saved and summed.
class Observed final : public StepSync {
 public:
  Observed(StepSync& inner, std::function<bool(int64_t)> one_model) : in_(inner), one_model_(std::move(one_model)) {}
  int rank() const override { return in_.rank(); }
  int world_size() const override { return in_.world_size(); }
  MuonAdamW& optimizer() override { return in_.optimizer(); }
  std::string describe() const override { return in_.describe(); }
  StepShare begin_step(int64_t step) override { return in_.begin_step(step); }
  float micro_batch(int m, const int32_t* x, const int32_t* y, int b, int t) override {
    return in_.micro_batch(m, x, y, b, t);
  }
  double update(const StepSchedule& s) override { return in_.update(s); }
  StepStats finish(RankStep mine) override { return in_.finish(mine); }
  bool in_sync(int64_t step) const override { return one_model_(step); }
  void check_replicas(int64_t step) override {
    checked.push_back(step);
    in_.check_replicas(step);
  }
  void sum_over_ranks(double* v, size_t n) override { in_.sum_over_ranks(v, n); }
  void save(const std::string& dir, const RunMeta& meta, const LoopState& state, const FaultInjector& f) override {
    saved.push_back(state.step);
    in_.save(dir, meta, state, f);
  }
  LoopState resume(const TrainPlan& plan, int64_t step) override { return in_.resume(plan, step); }
  std::vector<int64_t> checked, saved;

 private:
  StepSync& in_;
  std::function<bool(int64_t)> one_model_;
};

// metrics.jsonl's records: the train records' steps, losses and lrms; the val records' steps.
struct Records {
  std::vector<int64_t> train_steps, val_steps;
  std::vector<float> losses;
  std::vector<double> lrms;
};
Records read_metrics(const std::string& path) {
  Records r;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.contains("loss")) {
      r.train_steps.push_back(j.at("step").get<int64_t>());
      r.losses.push_back(j.at("loss").get<float>());
      r.lrms.push_back(j.at("lrm").get<double>());
    } else if (j.contains("val_bpb")) {
      r.val_steps.push_back(j.at("step").get<int64_t>());
    }
  }
  return r;
}

// One run of the real loop; what it logged and the weights it ended with.
struct LoopRun {
  Records records;
  std::vector<float> weights;
  std::vector<int64_t> extra_eval_steps, fetched, val_read_after, checked, saved;
  LoopState st;
};

LoopRun run_loop(TrainPlan plan, std::vector<StepRows> steps, std::function<bool(int64_t)> one_model,
                 Membership& membership, StepLog step_log = {}) {
  const TempDir tmp("train_loop_test");
  plan.checkpoint_dir = tmp.dir;
  const JobLayout layout = make_layout();
  GPT model(plan.model);
  nctest::init_tiny_gpt(model);
  LocalCommunicator comm;
  const std::unique_ptr<StepSync> zero2 = make_step_sync(plan, layout, model, comm);
  Observed sync(*zero2, std::move(one_model));
  RowsInMemory data(std::move(steps));
  LoopRun out;
  {
    MetricsLog metrics(tmp.dir + "/metrics.jsonl", true, -1);
    RunMeta meta;
    meta.model_config = plan.model;
    TrainContext ctx{
        plan,  layout,     nctest::byte_tokenizer(), model, sync, data, metrics, out.st, no_faults(), meta, 1.0, false,
        false, membership, std::move(step_log)};
    ctx.extra_eval = [&out](int64_t step, bool, MetricsLog&, StepSync&) { out.extra_eval_steps.push_back(step); };
    TrainLoop loop(ctx);
    EXPECT_EQ(loop.run(), "");
  }
  out.records = read_metrics(tmp.dir + "/metrics.jsonl");
  out.weights.assign(model.param_data(), model.param_data() + model.num_params());
  out.fetched = data.fetched;
  out.val_read_after = data.val_read_after;
  out.checked = sync.checked;
  out.saved = sync.saved;
  return out;
}

bool always(int64_t) { return true; }

}  // namespace

TEST(TrainLoop, TrainsAsTheSyncDrivenByHandWithThePlansSchedule) {
  const TrainPlan plan = make_plan("");
  FixedMembership fixed;
  const LoopRun loop = run_loop(plan, make_steps(kSteps), always, fixed);

  // the same steps driven by hand (step_sync_test.cpp's drive), the schedule from the LrSchedule
  GPT model(plan.model);
  nctest::init_tiny_gpt(model);
  LocalCommunicator comm;
  const std::unique_ptr<StepSync> sync = make_step_sync(plan, make_layout(), model, comm);
  const std::vector<StepRows> steps = make_steps(kSteps);
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  std::vector<float> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    const StepShare share = sync->begin_step(s);
    int64_t row = share.first_row;
    for (size_t m = 0; m < share.micro_batches.size(); ++m) {
      const int n = share.micro_batches[m];
      split_rows(steps[static_cast<size_t>(s)].rows.data() + row * (T + 1), n, T, x.data(), y.data());
      sync->micro_batch(static_cast<int>(m), x.data(), y.data(), n, T);
      row += n;
    }
    const LrSchedule& lr = plan.schedule;
    RankStep mine;
    mine.opt_compute = sync->update({static_cast<float>(lr.lr_multiplier(s)), static_cast<float>(lr.muon_momentum(s)),
                                     static_cast<float>(lr.muon_weight_decay(s, 0.0))});
    model.params_changed();
    losses.push_back(static_cast<float>(sync->finish(mine).loss));
  }

  ASSERT_EQ(loop.records.train_steps, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(loop.records.losses, losses);
  for (int64_t s = 0; s < kSteps; ++s)
    EXPECT_EQ(loop.records.lrms[static_cast<size_t>(s)], plan.schedule.lr_multiplier(s));
  EXPECT_EQ(loop.weights, std::vector<float>(model.param_data(), model.param_data() + model.num_params()))
      << "the loop's steps are the hand-driven ones, bit for bit";
  EXPECT_NE(losses.front(), losses.back());
  // every step boundary evaluated, compared and saved (the cadence says every step), the last too
  EXPECT_EQ(loop.fetched, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(loop.records.val_steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(loop.extra_eval_steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(loop.saved, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(loop.st.step, kSteps);
}

TEST(TrainLoop, EvaluatesComparesAndSavesOnlyWhereTheRanksAreOneModel) {
  FixedMembership fixed;
  const LoopRun loop = run_loop(
      make_plan(""), make_steps(kSteps), [](int64_t step) { return step % 2 == 0 || step == kSteps; }, fixed);
  EXPECT_EQ(loop.records.train_steps, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "every step is trained";
  EXPECT_EQ(loop.records.val_steps, (std::vector<int64_t>{0, 2, 4, 5}));
  EXPECT_EQ(loop.extra_eval_steps, (std::vector<int64_t>{0, 2, 4, 5}));
  EXPECT_EQ(loop.val_read_after, (std::vector<int64_t>{0, 2, 4, 5})) << "the val rows are read at those boundaries";
  EXPECT_EQ(loop.checked, (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(loop.saved, (std::vector<int64_t>{2, 4, 5}));
}

TEST(TrainLoop, AStreamThatEndsTheRunStopsItWhereItsRowsSay) {
  TrainPlan plan = make_plan("");
  plan.run_end = RunEnd::Stream;
  plan.num_iterations = std::numeric_limits<int64_t>::max();
  const SftSchedule lr{0.0, 0.5, 0.0};
  plan.step_schedule = sft_schedule(lr, 0.0);
  std::vector<StepRows> steps = make_steps(4);
  const double progress[] = {0.6, 0.55, 0.9, 1.0};  // the LR takes the largest so far
  for (size_t s = 0; s < steps.size(); ++s) steps[s].progress = progress[s];
  steps[3].end = true;  // step 3 is the last: not trained
  StepLog counted;      // chat_sft.py's naming: the steps done
  counted.name_offset = 1;
  FixedMembership fixed;
  const LoopRun loop = run_loop(plan, steps, always, fixed, counted);
  EXPECT_EQ(loop.st.step, 3);
  EXPECT_EQ(loop.fetched, (std::vector<int64_t>{0, 1, 2, 3})) << "each step's rows read once, the last's too";
  EXPECT_EQ(loop.records.train_steps, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(loop.records.lrms,
            (std::vector<double>{lr.lr_multiplier(0.6), lr.lr_multiplier(0.6), lr.lr_multiplier(0.9)}));
  EXPECT_NE(lr.lr_multiplier(0.6), lr.lr_multiplier(0.55));
  EXPECT_EQ(loop.saved, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(loop.val_read_after, (std::vector<int64_t>{1, 2, 3, 4})) << "a step's rows are read before its evaluation";
}

namespace {

struct Admitted : MembershipChange {
  Admitted(int64_t step, int64_t saved) : MembershipChange("admitted"), step(step), saved(saved) {}
  int64_t step, saved;
};

// Ranks ask to join while step `at` runs.
class JoinAt final : public Membership {
 public:
  explicit JoinAt(int64_t at) : at_(at) {}
  void peer_lost(const PeerLost&, int64_t, int, MetricsLog&) override {}
  void go_on_without(const PeerLoss&) override {}
  int joiners_waiting() override { return calls_++ == at_ ? 1 : 0; }
  bool join_due(const StepStats& s) const override { return s.ranks.at(0).joiners > 0; }
  [[noreturn]] void admit_joiners(int64_t step, int64_t saved) override { throw Admitted(step, saved); }

 private:
  int64_t at_, calls_ = 0;
};

}  // namespace

TEST(TrainLoop, RanksThatJoinEndTheRunAtTheStepBoundaryAfterItsSave) {
  TrainPlan plan = make_plan("");
  plan.cadence.save_every = -1;
  plan.cadence.eval_every = -1;
  JoinAt join(1);
  const TempDir tmp("train_loop_join");
  plan.checkpoint_dir = tmp.dir;
  const JobLayout layout = make_layout();
  GPT model(plan.model);
  nctest::init_tiny_gpt(model);
  LocalCommunicator comm;
  const std::unique_ptr<StepSync> sync = make_step_sync(plan, layout, model, comm);
  RowsInMemory data(make_steps(kSteps));
  MetricsLog metrics(tmp.dir + "/metrics.jsonl", true, -1);
  LoopState st;
  RunMeta meta;
  meta.model_config = plan.model;
  TrainContext ctx{
      plan, layout,   nctest::byte_tokenizer(), model, *sync, data, metrics, st, no_faults(), meta, 1.0, false, false,
      join, StepLog{}};
  TrainLoop loop(ctx);
  try {
    loop.run();
    FAIL() << "the loop did not end for the ranks that join";
  } catch (const Admitted& a) {
    EXPECT_EQ(a.step, 2) << "the boundary after the step whose statistics carried the request";
    EXPECT_EQ(a.saved, 2);
  }
  EXPECT_EQ(data.fetched, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(last_complete_step(tmp.dir), std::optional<int64_t>(2)) << "the state the job goes on from is on disk";
}
