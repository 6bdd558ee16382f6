#include "nanochat/train/diloco_sync.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/train/outer_wire.h"
#include "nanochat/train/zero2_replicas.h"

namespace nanochat {

namespace {

// What a rank sends at a boundary: its step, and its rows and compute seconds over the round.
struct BoundaryStep {
  RankStep step;
  double round_rows = 0;
  double round_compute = 0;
};

}  // namespace

std::string DiLoCoSync::outer_state_file(const std::string& dir, int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "/outer_%06lld.safetensors", static_cast<long long>(step));
  return dir + b;
}

std::vector<int> DiLoCoSync::nodes_of_ranks(Communicator& comm, int local_rank) {
  const int64_t first = comm.rank() - local_rank;  // the node's first rank
  const std::vector<int64_t> firsts =
      comm.world_size() > 1 ? all_gather_value<int64_t>(comm, first) : std::vector<int64_t>{first};
  std::vector<int> node(firsts.size());
  int index = -1;
  for (size_t r = 0; r < firsts.size(); ++r) {
    if (r == 0 || firsts[r] != firsts[r - 1]) ++index;
    node[r] = index;
  }
  return node;
}

DiLoCoSync::DiLoCoSync(GPT& model, const TrainPlan& plan, Communicator& comm, const std::vector<int>& device_batches,
                       int64_t rows_per_step, const std::vector<int>& node_of_rank)
    : model_(model),
      comm_(comm),
      outer_cfg_(plan.outer),
      num_iterations_(plan.num_iterations),
      cadence_(plan.cadence),
      node_of_rank_(node_of_rank),
      balancer_(device_batches, rows_per_step, {plan.balance}),
      mode_(plan.balance) {
  const int W = comm.world_size(), me = comm.rank();
  if (static_cast<int>(node_of_rank_.size()) != W)
    fail("DiLoCo: ", node_of_rank_.size(), " node indices for ", W, " ranks");
  for (int r = 0; r < W; ++r) {
    const int n = node_of_rank_[static_cast<size_t>(r)];
    const int before = r == 0 ? 0 : node_of_rank_[static_cast<size_t>(r - 1)];  // rank 0 is on node 0
    if (n != before && (r == 0 || n != before + 1))
      fail("DiLoCo: the ranks of a node must be contiguous (rank ", r, " is on node ", n, ")");
  }
  node_ = node_of_rank_[static_cast<size_t>(me)];
  nodes_ = node_of_rank_.back() + 1;
  node_first_ = static_cast<int>(std::find(node_of_rank_.begin(), node_of_rank_.end(), node_) - node_of_rank_.begin());
  node_size_ = static_cast<int>(std::count(node_of_rank_.begin(), node_of_rank_.end(), node_));
  node_comm_ = comm.split(node_);
  leaders_comm_ = comm.split(me == node_first_ ? 0 : 1);
  inner_ = std::make_unique<MuonAdamW>(optimizer_params(model), plan.optim, node_comm_.get());
  std::function<void(size_t)> ready;
  if (node_size_ > 1) ready = [this](size_t k) { inner_->grad_ready(k); };
  accum_ = std::make_unique<GradAccumulator>(model, static_cast<int>(balancer_.max_micro_batches()), *node_comm_,
                                             std::move(ready));
  inner_->set_summed_by_caller(accum_->summed_here());
  if (me == node_first_) {
    const size_t n = static_cast<size_t>(model.num_params());
    outer_.assign(model.param_data(), model.param_data() + n);
    momentum_.assign(n, 0.f);
    delta_.resize(n);
    if (late() > 0) sent_at_.resize(n);
  }
  last_.assign(static_cast<size_t>(W), RankStep{});
  comm.on_peer_lost([lost = lost_](int peer, const std::string& why) {  // the hook may outlive this sync
    std::lock_guard<std::mutex> lk(lost->mu);
    if (lost->peer < 0) {
      lost->peer = peer;
      lost->why = why;
    }
  });
}

DiLoCoSync::~DiLoCoSync() {
  if (in_flight_.valid()) in_flight_.wait();  // the exchange's thread uses leaders_comm_ and the buffers
}

int DiLoCoSync::rank() const { return comm_.rank(); }
int DiLoCoSync::world_size() const { return comm_.world_size(); }

std::string DiLoCoSync::describe() const {
  const double n = static_cast<double>(model_.num_params());
  const double W = world_size();
  // ZeRO-2's reduce-scatter and all-gather: each (W-1)/W of the model in fp32 out of every rank
  const std::string zero2 =
      W > 1 ? str_cat(" instead of about ", fixed(2 * (W - 1) / W * 4 * n / 1e6, 1), " MB per step with --sync zero2")
            : std::string();
  return str_cat("DiLoCo: ", nodes_, nodes_ == 1 ? " node" : " nodes", " (", world_size(),
                 world_size() == 1 ? " rank" : " ranks", "); rows per step ", balancer_.step_rows(), ", dealt ",
                 mode_ == BalanceMode::Even ? "evenly" : "by the speed measured over each round", "; each node sends ",
                 fixed(static_cast<double>(wire_bytes(outer_cfg_.wire, static_cast<size_t>(n))) / 1e6, 1),
                 " MB per round (", wire_dtype_name(outer_cfg_.wire), ")",
                 late() > 0 ? str_cat(", applied ", late(), " steps later while the nodes train on") : std::string(),
                 zero2);
}

bool DiLoCoSync::drain(int64_t step) const {
  return step >= num_iterations_ || cadence_.eval_at(step, false) || cadence_.sample_at(step, false) ||
         cadence_.save_at(step, false);
}

bool DiLoCoSync::boundary(int64_t step) const { return step % outer_cfg_.every == 0 || drain(step); }

bool DiLoCoSync::in_sync(int64_t step) const { return late() > 0 ? drain(step) : boundary(step); }

StepShare DiLoCoSync::begin_step(int64_t step) {
  {
    std::lock_guard<std::mutex> lk(lost_->mu);
    if (lost_->peer >= 0) throw PeerLost(lost_->why, lost_->peer);  // the round in progress is lost anyway
  }
  step_ = step;
  synced_ = false;
  split_ = balancer_.rows();
  rows_ = 0;
  loss_sum_ = 0;
  node_tokens_ = 0;
  node_rows_ = 0;
  std::vector<int> counts;
  const std::vector<int> all = balancer_.micro_batch_counts();
  for (int q = node_first_; q < node_first_ + node_size_; ++q) {
    counts.push_back(all[static_cast<size_t>(q)]);
    node_rows_ += split_[static_cast<size_t>(q)];
  }
  if (node_rows_ > 0) accum_->begin_step(counts);
  return StepShare{balancer_.first_row(rank()), balancer_.micro_batches(rank())};
}

float DiLoCoSync::micro_batch(int micro, const int32_t* idx, const int32_t* targets, int B, int T) {
  const int64_t before = accum_->local_tokens();
  const float loss = accum_->micro_batch(micro, idx, targets, B, T);
  loss_sum_ += static_cast<double>(loss) * static_cast<double>(accum_->local_tokens() - before);
  rows_ += B;
  return loss;
}

double DiLoCoSync::update(const StepSchedule& s) {
  double opt_compute = 0;
  if (node_rows_ > 0) {  // the node's inner step: ZeRO-2 over its own ranks
    const float scale = accum_->finish();
    node_tokens_ = static_cast<int64_t>(accum_->step_tokens());
    const double wait0 = inner_->comm_wait_seconds();
    Timer t;
    inner_->step(s.lr_multiplier, s.muon_momentum, s.muon_weight_decay, scale);
    opt_compute = t.seconds() - (inner_->comm_wait_seconds() - wait0);
    model_.zero_grad();
  }
  round_tokens_ += static_cast<double>(node_tokens_);
  if (boundary(step_ + 1)) {
    outer_step();
    synced_ = true;
  } else if (apply_at_ == step_ + 1) {
    apply_late_step();
  }
  return opt_compute;
}

void DiLoCoSync::exchange(float* delta, size_t n, double weight) try {
  double total = weight;
  leaders_comm_->all_reduce_sum_f64(&total, 1)->wait();
  const float f = total > 0 ? static_cast<float>(weight / total) : 0.f;
  for (size_t i = 0; i < n; ++i) delta[i] *= f;
  if (outer_cfg_.wire == WireDtype::Float32) {
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(delta[i]))
        fail("DiLoCo: node ", node_, "'s change over the round is not finite (the training diverged on it)");
    leaders_comm_->all_reduce_sum(delta, n)->wait();
    return;
  }
  if (!encode_wire(outer_cfg_.wire, delta, n, wire_))
    fail("DiLoCo: node ", node_, "'s change over the round is not finite (the training diverged on it)");
  const size_t bytes = wire_.size();
  std::vector<uint8_t> all(bytes * static_cast<size_t>(nodes_));
  leaders_comm_->all_gather_bytes(wire_.data(), all.data(), std::vector<size_t>(static_cast<size_t>(nodes_), bytes))
      ->wait();
  std::fill(delta, delta + n, 0.f);
  for (int q = 0; q < nodes_; ++q)
    add_decoded_wire(outer_cfg_.wire, all.data() + bytes * static_cast<size_t>(q), n, delta);
} catch (const PeerLost& e) {  // the leaders' communicator numbers nodes: name the job's rank
  const int q = e.peer();
  const int rank =
      q >= 0 && q < nodes_
          ? static_cast<int>(std::find(node_of_rank_.begin(), node_of_rank_.end(), q) - node_of_rank_.begin())
          : q;
  throw PeerLost(str_cat(e.what(), " (node ", q, ", job rank ", rank, ")"), rank);
}

void DiLoCoSync::outer_update(const float* d) {
  const double lr = outer_cfg_.lr, mu = outer_cfg_.momentum;
  for (size_t i = 0; i < outer_.size(); ++i) {
    const double di = d[i];
    const double bar = outer_[i] - di;  // the nodes' mean weights
    const double m = mu * momentum_[i] + di;
    momentum_[i] = static_cast<float>(m);
    outer_[i] = static_cast<float>(bar + (1.0 - lr) * di - lr * mu * m);
  }
}

double DiLoCoSync::apply_late() {
  Timer t;
  in_flight_.get();  // rethrows the exchange's failure
  const double waited = t.seconds();
  outer_update(delta_.data());
  float* theta = model_.param_data();
  for (size_t i = 0; i < outer_.size(); ++i) theta[i] = outer_[i] - (sent_at_[i] - theta[i]);
  return waited;
}

void DiLoCoSync::apply_late_step() {
  double waited = 0;
  if (rank() == node_first_) waited = apply_late();
  apply_at_ = -1;
  const size_t n = static_cast<size_t>(model_.num_params());
  if (node_size_ > 1) node_comm_->broadcast(model_.param_data(), n * sizeof(float), 0)->wait();
  if (rank() == 0)
    pending_notes_.push_back(str_cat("Applied the outer step of step ", sent_after_, " after step ", step_ + 1,
                                     " (waited ", fixed(waited, 2), " s for the exchange, which took ",
                                     fixed(exchange_seconds_, 2), " s beside the training",
                                     waited > 1.0 ? "; a larger --outer-overlap would hide it" : "", ")"));
}

void DiLoCoSync::outer_step() {
  const size_t n = static_cast<size_t>(model_.num_params());
  const int64_t done = step_ + 1;
  float* theta = model_.param_data();
  Timer t;
  double waited = -1;  // seconds waited for an exchange still in flight (-1: none was)
  const bool send_late = late() > 0 && !drain(done);
  if (rank() == node_first_ && nodes_ == 1) {  // theta_bar and D are the node's own
    const double lr = outer_cfg_.lr, mu = outer_cfg_.momentum;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(outer_[i]) - theta[i];
      const double m = mu * momentum_[i] + d;
      momentum_[i] = static_cast<float>(m);
      const float next = static_cast<float>(theta[i] + (1.0 - lr) * d - lr * mu * m);
      outer_[i] = next;
      theta[i] = next;
    }
  } else if (rank() == node_first_) {
    if (apply_at_ >= 0) waited = apply_late();  // a drain inside the last exchange's K steps: apply it first
    for (size_t i = 0; i < n; ++i) delta_[i] = outer_[i] - theta[i];
    if (send_late) {  // train on from here; apply_late_step() applies the mean K steps later
      std::copy(theta, theta + n, sent_at_.begin());
      const double weight = round_tokens_;
      in_flight_ = std::async(std::launch::async, [this, n, weight] {
        Timer on_thread;
        exchange(delta_.data(), n, weight);
        exchange_seconds_ = on_thread.seconds();
      });
    } else {
      exchange(delta_.data(), n, round_tokens_);
      outer_update(delta_.data());
      std::copy(outer_.begin(), outer_.end(), theta);
    }
  }
  if (apply_at_ >= 0 && rank() == 0)
    pending_notes_.push_back(str_cat("Applied the outer step of step ", sent_after_, " after step ", done,
                                     " (before this boundary; waited ", fixed(std::max(waited, 0.0), 2),
                                     " s for the exchange, which took ", fixed(exchange_seconds_, 2), " s)"));
  apply_at_ = send_late ? done + late() : -1;
  sent_after_ = done;
  if (node_size_ > 1) node_comm_->broadcast(theta, n * sizeof(float), 0)->wait();
  if (rank() == 0) {
    const std::string mb = fixed(static_cast<double>(nodes_ > 1 ? wire_bytes(outer_cfg_.wire, n) : 0) / 1e6, 1);
    pending_notes_.push_back(
        str_cat("Outer step after step ", done, ": ", nodes_, nodes_ == 1 ? " node, " : " nodes, ",
                static_cast<int64_t>(round_tokens_), " tokens on node 0 this round, ", mb,
                send_late ? str_cat(" MB sent, applied after step ", done + late(), " (the nodes train on meanwhile), ",
                                    fixed(t.seconds(), 2), " s at this boundary")
                          : str_cat(" MB sent, ", fixed(t.seconds(), 2), " s")));
  }
  round_tokens_ = 0;
}

StepStats DiLoCoSync::finish(RankStep mine) {
  mine.rows = static_cast<double>(rows_);
  mine.loss_sum = loss_sum_;
  mine.tokens = static_cast<double>(accum_->local_tokens());
  if (node_rows_ == 0) mine.tokens = 0;
  round_rows_ += mine.rows;
  round_compute_ += mine.compute;
  StepStats st;
  st.split = split_;
  // with other nodes, theirs are of the last boundary's step (one node: every rank is gathered below)
  st.times_of_this_step = nodes_ == 1;
  if (synced_) {  // a boundary: every rank's step and round, over the job
    const BoundaryStep b{mine, round_rows_, round_compute_};
    const std::vector<BoundaryStep> all =
        world_size() > 1 ? all_gather_value<BoundaryStep>(comm_, b) : std::vector<BoundaryStep>{b};
    std::vector<RankStepTimes> times;
    for (size_t q = 0; q < all.size(); ++q) {
      last_[q] = all[q].step;
      times.push_back({all[q].round_rows, all[q].round_compute});
    }
    st.ranks = last_;
    if (!in_sync(step_ + 1))  // ranks join only where the weights are one model
      for (RankStep& x : st.ranks) x.joiners = 0;
    round_rows_ = round_compute_ = 0;
    if (balancer_.observe(times)) {
      std::string speeds;
      for (size_t r = 0; r < balancer_.speeds().size(); ++r)
        speeds += str_cat(r ? " / " : "", fixed(balancer_.speeds()[r], 1));
      st.notes.push_back(str_cat("Rows per rank from step ", step_ + 1, " on: ", split_percentages(balancer_.rows()),
                                 " (speeds measured over the round, rows/s: ", speeds, ")"));
    }
  } else {  // inside a round: the node's ranks only
    const std::vector<RankStep> mine_node =
        node_size_ > 1 ? all_gather_value<RankStep>(*node_comm_, mine) : std::vector<RankStep>{mine};
    for (int q = 0; q < node_size_; ++q)
      last_[static_cast<size_t>(node_first_ + q)] = mine_node[static_cast<size_t>(q)];
    st.ranks = last_;
    for (RankStep& x : st.ranks) x.joiners = 0;
    // the loss of this node's step (the loop reads it from every rank's sums)
    for (size_t q = 0; q < st.ranks.size(); ++q)
      if (node_of_rank_[q] != node_) st.ranks[q].loss_sum = st.ranks[q].tokens = 0;
  }
  double loss_sum = 0, tokens = 0;
  for (const RankStep& x : st.ranks) {
    loss_sum += x.loss_sum;
    tokens += x.tokens;
  }
  if (tokens <= 0 && synced_) fail("no rank had a valid target (every target was -1) in step ", step_);
  st.loss = tokens > 0 ? loss_sum / tokens : 0.0;
  st.speeds = balancer_.speeds();
  for (std::string& note : pending_notes_) st.notes.push_back(std::move(note));
  pending_notes_.clear();
  return st;
}

void DiLoCoSync::check_replicas(int64_t step) { nanochat::check_replicas(model_, comm_, step); }

void DiLoCoSync::sum_over_ranks(double* v, size_t n) {
  if (world_size() > 1) comm_.all_reduce_sum_f64(v, n)->wait();
}

void DiLoCoSync::save(const std::string& dir, const RunMeta& run_meta, const LoopState& state,
                      const FaultInjector& faults) {
  // every node: its inner optimizer into its own folder (node 0's is the job's checkpoint)
  // the folder holds one node's optimizer: a checkpoint of node_size_ ranks (resumable by --sync zero2 too)
  RunMeta meta = run_meta;
  meta.world_size = node_size_;
  if (node_ == 0)
    save_checkpoint(*node_comm_, dir, model_, *inner_, meta, state, faults);
  else
    save_checkpoint(*node_comm_, dir, model_, *inner_, meta, state, no_faults(),
                    str_cat("node ", node_,
                            "'s own checkpoint (its optimizer state, to resume on this machine; node 0 "
                            "holds the job's),"));
  if (rank() == 0) {
    const size_t n = momentum_.size();
    write_safetensors_atomic(outer_state_file(dir, state.step),
                             {{"outer_momentum", "F32", {static_cast<int64_t>(n)}, momentum_.data()}},
                             {{"format", "nanochat.cpp DiLoCo outer state"}});
  }
  comm_.barrier()->wait();
}

LoopState DiLoCoSync::resume(const TrainPlan& plan, int64_t step) {
  // does this node hold its own inner state of that step? (node 0 always must)
  int has = 0;
  if (node_comm_->rank() == 0)
    has = std::filesystem::exists(CheckpointPaths{plan.checkpoint_dir, step}.marker()) ? 1 : 0;
  if (node_size_ > 1) node_comm_->broadcast(&has, sizeof has, 0)->wait();
  if (node_ == 0 && !has)
    fail("--resume-from-step ", step, ": node 0 has no checkpoint ",
         CheckpointPaths{plan.checkpoint_dir, step}.marker());
  LoopState st;
  if (has) st = nanochat::resume(*node_comm_, plan, step, model_, *inner_);
  // the weights, the loop state and the outer momentum: node 0's
  const size_t n = static_cast<size_t>(model_.num_params());
  comm_.broadcast(model_.param_data(), n * sizeof(float), 0)->wait();
  std::string state = rank() == 0 ? st.to_json().dump() : std::string();
  const std::vector<std::string> states = all_gather_strings(comm_, state);
  st = LoopState::from_json(nlohmann::json::parse(states[0]));
  if (rank() == node_first_) {
    if (rank() == 0) {
      const StFile f = load_safetensors(outer_state_file(plan.checkpoint_dir, step));
      momentum_ = f.at("outer_momentum").to_f32();
      if (momentum_.size() != n) fail(f.path, ": outer_momentum has ", momentum_.size(), " values, the model ", n);
    }
    if (nodes_ > 1) leaders_comm_->broadcast(momentum_.data(), n * sizeof(float), 0)->wait();
    outer_.assign(model_.param_data(), model_.param_data() + n);
  }
  const int fresh = has ? 0 : 1;
  const std::vector<int> fresh_nodes = world_size() > 1 ? all_gather_value<int>(comm_, fresh) : std::vector<int>{fresh};
  for (size_t q = 0; q < fresh_nodes.size(); ++q)
    if (fresh_nodes[q] && (q == 0 || node_of_rank_[q] != node_of_rank_[q - 1]))
      print_line_if(rank() == 0,
                    str_cat("Node ", node_of_rank_[q], " (rank ", q, ") has no inner optimizer state of step ", step,
                            " in its own checkpoint folder: it starts that state afresh"));
  return st;
}

void DiLoCoSync::keep_copy(const RunMeta& run_meta, const LoopState& state) {
  if (world_size() == 1 || node_ != 0) return;  // node 0 alone has nobody to lose; the others keep nothing
  RunMeta meta = run_meta;
  meta.world_size = node_size_;
  copy_checkpoint_state(*node_comm_, model_, *inner_, meta, state, &copy_);
  if (rank() == 0) copy_momentum_ = momentum_;
}

int64_t DiLoCoSync::save_copy(const std::string& dir) {
  if (rank() != 0 || copy_.step < 0) return -1;
  const CheckpointPaths cp = write_job_state_copy(dir, model_, copy_);
  write_safetensors_atomic(
      outer_state_file(dir, copy_.step),
      {{"outer_momentum", "F32", {static_cast<int64_t>(copy_momentum_.size())}, copy_momentum_.data()}},
      {{"format", "nanochat.cpp DiLoCo outer state"}});
  std::printf("Saved checkpoint %s (node 0's copy of its state at step %lld, the last boundary)\n", cp.model().c_str(),
              static_cast<long long>(copy_.step));
  std::fflush(stdout);
  return copy_.step;
}

}  // namespace nanochat
