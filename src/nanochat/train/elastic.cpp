#include "nanochat/train/elastic.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/heartbeat.h"
#include "nanochat/cluster/regroup.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/format.h"
#include "nanochat/core/test_fault.h"
#include "nanochat/train/diloco_sync.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/sync.h"

namespace nanochat {

void ElasticMembership::started(MetricsLog& metrics, bool master) {
  loop_started_ = true;
  if (!rejoined_) return;  // a regrouped job: who left, and how long it took to go on
  const double seconds = rejoined_->before + rejoined_->since.seconds();
  print_line_if(master, str_cat(rejoined_->line, "; training again ", fixed(seconds, 1), " s ", rejoined_->since_what));
  const nlohmann::json& n = rejoined_->note;  // one record, or one per change (a leave and a join at once)
  for (nlohmann::json note : n.is_array() ? n : nlohmann::json::array({n})) {
    note["recovery_s"] = seconds;
    metrics.record(note);
  }
}

void ElasticMembership::go_on_without(const PeerLoss& loss) {
  const PeerLost& e = loss.error;
  if (loss.copy_failed || e.peer() == 0) return;  // rank 0 holds the store, the data and the checkpoints
  throw RankLeft(str_cat("step ", loss.step, " (", loss.phase, ") was interrupted: ", e.what()), e.peer(), loss.step,
                 loss.saved, loss.seconds);
}

bool ElasticMembership::join_due(const StepStats& stats) const {
  return !stats.ranks.empty() && stats.ranks[0].joiners > 0;
}

void ElasticMembership::admit_joiners(int64_t step, int64_t saved) {
  throw NodesJoin(str_cat("ranks join the job at step ", step), step, saved);
}

int elastic_min_world_size() {
  return static_cast<int>(std::max<long>(0, cluster::env_int("NANOCHAT_MIN_WORLD_SIZE").value_or(0)));
}

bool elastic_job(const Communicator& comm) {
  return comm.world_size() > 1 || cluster::env_int("NANOCHAT_STORE_HOSTED").value_or(0) == 1;
}

int64_t elastic_copy_every(int64_t given, bool diloco, int64_t sync_every, int min_world_size, bool master) {
  if (given > 0) return given;
  // Node 0's copy every 10 steps: a rank that leaves costs at most 9 steps done again (the stream
  // stays exact). Every step costs far more: 28% of a d8 step of 8,192 tokens over 1 Gbit/s, 2%
  // at 10 (bench/dist/elastic.sh).
  constexpr int64_t kEvery = 10;
  if (master && diloco)  // the copy at every round's boundary (the weights are one model there only)
    std::printf(
        "Elastic job (at least %d ranks): node 0 keeps a copy of its state at every round's boundary (every %lld "
        "steps; with --outer-overlap only at those that also evaluate, sample or save); a node that leaves costs the "
        "steps since that copy; nodes join at those boundaries\n",
        min_world_size, static_cast<long long>(sync_every));
  else if (master)
    std::printf(
        "Elastic job (at least %d ranks): node 0 keeps a copy of the job's state every %lld steps "
        "(--copy-state-every %lld: a node that leaves costs at most %lld steps done again; 1 costs none but copies "
        "every step); nodes may leave and join\n",
        min_world_size, static_cast<long long>(kEvery), static_cast<long long>(kEvery),
        static_cast<long long>(kEvery - 1));
  if (master) std::fflush(stdout);
  return diloco ? sync_every : kEvery;
}

#ifdef NANOCHAT_HAVE_GLOO
namespace {

std::string rank_list(const std::vector<int>& members) {
  return members.size() == 1 ? "0" : nlohmann::json(members).dump();
}

// "rank 2: local rank 0 of node 2 (host h, pid 7); rank 3: ..." for the ranks a regroup admitted.
std::string joined_ranks(const cluster::Regrouped& g) {
  std::string who;
  for (size_t i = 0; i < g.joined.size(); ++i)
    who += str_cat(i ? "; " : "", "rank ", g.members.size() + i, ": ", g.joined[i]);
  return who;
}

// The line and record of a regroup that admitted the nodes that asked to join at step `step`.
Rejoined describe_join(int64_t step, const cluster::Regrouped& g, int old_world, int64_t next = 0) {
  Rejoined r;
  const std::string who = joined_ranks(g);
  const size_t world = g.members.size() + g.joined.size();
  r.line = str_cat(g.joined.size() == 1 ? "A rank joined" : str_cat(g.joined.size(), " ranks joined"),
                   " the job at step ", step + next, " (", who, "); ", world, " ranks go on from step ", step + next,
                   " with node 0's state of that step; the balancer gives the new ranks rows once their speed is "
                   "measured");
  r.note = {{"step", step + next},
            {"membership", str_cat(g.joined.size(), g.joined.size() == 1 ? " rank joined" : " ranks joined")},
            {"reason", who},
            {"world_size", old_world},
            {"world_size_after", world},
            {"members", g.members},
            {"joined", g.joined}};
  return r;
}

// The line and record of a regroup after rank `e.peer` left, once the ranks that go on are known
// (completed when they are ready).
Rejoined describe_leave(const RankLeft& e, const cluster::Regrouped& g, int old_world, int64_t next) {
  Rejoined r;
  const int64_t from = g.step + next;  // the first step trained again
  const int64_t age = g.step >= 0 ? e.step - from : -1;
  const size_t world = g.members.size() + g.joined.size();
  r.line =
      str_cat("Rank ", e.peer, " left the job in step ", e.step, " (", e.what(), "); ", world,
              world == 1 ? " rank goes on (old rank " : " ranks go on (old ranks ", rank_list(g.members), ")",
              g.joined.empty() ? "" : str_cat(" with ", g.joined.size(), " that joined (", joined_ranks(g), ")"), " ",
              g.step >= 0 ? str_cat("from step ", from, ": ",
                                    age > 0 ? str_cat("steps ", from, " to ", e.step, " are done again")
                                            : std::string("the interrupted step is redone"),
                                    ", and the optimizer state comes from node 0's copy of step ", g.step, " (", age,
                                    age == 1 ? " step" : " steps", " old)")
                          : std::string("from the start: node 0 held no copy and no checkpoint"));
  r.note = {{"step", g.step >= 0 ? from : 0},
            {"membership", str_cat("rank ", e.peer, " left")},
            {"reason", e.what()},
            {"world_size", old_world},
            {"world_size_after", world},
            {"members", g.members},
            {"joined", g.joined},
            {"interrupted_step", e.step},
            {"restored_steps_old", age}};
  if (!g.joined.empty())  // one record per change: the leave, then the join
    r.note = nlohmann::json::array(
        {r.note, describe_join(g.step >= 0 ? g.step : 0, g, static_cast<int>(g.members.size()), next).note});
  return r;
}

// Rank 0: removes the checkpoint of step `step` that a membership change wrote (marker first, so a
// half-removed one never reads as complete), unless the user's --save-every asked for that step.
// A laptop that comes and goes then leaves one such checkpoint, not one per change. Never throws.
void remove_membership_checkpoint(const ElasticJob& job, int64_t step) {
  if (step <= 0 || (job.save_every > 0 && step % job.save_every == 0)) return;
  const std::string dir = job.checkpoint_dir();
  const CheckpointPaths cp{dir, step};
  std::error_code ec;
  std::filesystem::remove(cp.marker(), ec);
  std::filesystem::remove(cp.model(), ec);
  std::filesystem::remove(cp.meta(), ec);
  const std::string optim_prefix = std::filesystem::path(cp.optim(0)).filename().string();
  const std::string prefix = optim_prefix.substr(0, optim_prefix.find("_rank") + 5);
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(f.path(), ec);
  std::filesystem::remove(DiLoCoSync::outer_state_file(dir, step), ec);  // --sync diloco's outer state
}

// Where the job's generations stand on this rank.
struct Generations {
  cluster::DistEnv env;       // the job's store (rank and world size of generation 0)
  cluster::DistOptions opts;  // resolved; generation 0's
  int generation = 0;
  std::unique_ptr<cluster::GlooCommunicator> owned;  // generations this rank built
  cluster::GlooCommunicator* cur = nullptr;          // null: rank 0 trains alone
  std::unique_ptr<cluster::JoinDesk> desk;           // rank 0
  int old_world() const { return cur ? cur->world_size() : 1; }
  bool rank0() const { return !cur || cur->rank() == 0; }  // rank 0 of the current generation
};

// Takes generation g.comm as the current one (null: rank 0 alone).
void advance(Generations& s, cluster::Regrouped& g) {
  // generation 0's object belongs to the caller: closed here (its heartbeat would otherwise go on
  // reporting, in that generation's ranks, on ranks that leave later); a later one is freed below
  if (s.cur && s.cur != s.owned.get())
    s.cur->close(str_cat("job generation ", s.generation, " ended; the job went on as generation ", g.generation));
  s.generation = g.generation;
  s.owned = std::move(g.comm);  // the previous generation this rank built, if any, goes now
  s.cur = s.owned.get();
}

// This rank asks to join again (it was left out, or it is a new node): it becomes a member of the
// generation rank 0 admits it to, and continues from that generation's step.
void rejoin(Generations& s, int64_t& resume_from_step, std::optional<Rejoined>& rejoined, int64_t next) {
  // the generation the others left it out of goes first: its heartbeat, lanes and connections
  // (generation 0's object belongs to the caller, so it is closed rather than freed; closing the
  // current one before freeing it below also ends its heartbeat before the wait for admission)
  if (s.cur)
    s.cur->close(str_cat("rank ", s.cur->rank(), " of job generation ", s.generation,
                         " was left out of the next one and asks to join again"));
  const cluster::Admission adm = cluster::request_to_join(s.env, s.opts, cluster::below_min_timeout());
  std::printf("rank %d of %d (job generation %d): admitted after %.1f s; training from step %lld with the job\n",
              adm.env.rank, adm.env.world_size, adm.options.generation, adm.waited_s,
              static_cast<long long>(adm.step + next));
  std::fflush(stdout);
  s.owned.reset();
  s.owned = std::make_unique<cluster::GlooCommunicator>(adm.env, adm.options);
  s.cur = s.owned.get();
  s.generation = adm.options.generation;
  resume_from_step = adm.step;
  rejoined = Rejoined{};  // the set-up report was printed by rank 0 at the start
}

// NANOCHAT_TEST_FAULT stop-setup:<rank> (core/test_fault.h): the process started as that RANK stops
// itself before its first generation's set-up; the test wakes it (SIGCONT).
void stop_before_setup_if_asked() {
  static const TestFault fault = test_fault_from_env();
  static const long rank = cluster::env_int("RANK").value_or(-1);
  static bool done = false;
  if (fault.kind != "stop-setup" || fault.rank != rank || done) return;
  done = true;
  ::raise(SIGSTOP);
}

// This rank was left out of the job's next generation (it froze): it says so and asks to join again.
void left_out(const std::string& why) {
  std::printf("%s; asking node 0 to admit it again\n", why.c_str());
  std::fflush(stdout);
}

void drive(Generations& s, const ElasticJob& job, int64_t resume_from_step, int min_world,
           std::optional<Rejoined> rejoined) {
  const cluster::Ms wait = std::max(cluster::heartbeat_timeout(), cluster::Ms(5000));
  int64_t changed_at = -1;                                // rank 0: the step of the last membership change's checkpoint
  auto note_checkpoint = [&](bool rank0, int64_t step) {  // keep only the latest one
    if (!rank0 || step < 0) return;
    if (changed_at >= 0 && changed_at != step) remove_membership_checkpoint(job, changed_at);
    changed_at = step;
  };
  for (;;) {
    const bool rank0 = s.rank0();
    if (rank0 && !s.desk) s.desk = std::make_unique<cluster::JoinDesk>(s.env, s.opts);
    std::function<int()> joiners;  // rank 0 counts the requests to join
    if (rank0) joiners = [&s] { return static_cast<int>(s.desk->waiting().size()); };
    ElasticMembership membership(rejoined ? &*rejoined : nullptr, joiners);
    cluster::RegroupPlan p;
    p.wait = wait;
    p.min_world = min_world;
    p.below_min_timeout = cluster::below_min_timeout();
    p.desk = s.desk.get();
    // What ended the generation; the next one is formed outside the handlers, so that a rank
    // found left out there (LeftOut) asks to join again like one that learns it in training.
    std::optional<RankLeft> left;
    std::optional<NodesJoin> join;
    try {
      stop_before_setup_if_asked();  // the tests' node that freezes as a stage starts
      if (s.cur) {
        job.run(*s.cur, membership, resume_from_step);
      } else {
        LocalCommunicator alone;  // rank 0 alone: one process, no group to lose anyone from
        job.run(alone, membership, resume_from_step);
      }
      if (s.desk) {  // the nodes that trained to the end (node 0's launcher waits for them only)
        std::vector<long> nodes{0};
        if (s.cur)
          for (const auto& peer : s.cur->peers()) nodes.push_back(peer.node);
        s.desk->close("the job finished its run", nodes);
      }
      return;
    } catch (const RankLeft& e) {
      if (e.peer == 0) throw;  // node 0 holds the store, the data and the checkpoints
      left = e;
    } catch (const NodesJoin& e) {
      join = e;
    } catch (const cluster::LeftOut& e) {
      left_out(e.what());
    } catch (const Error& e) {
      // a rank other than 0 lost in the command's set-up (its agreements, the data feed), before
      // the loop that lets ranks go started: nothing of this generation was trained, so the
      // others go on from where it started
      const auto* lost = dynamic_cast<const PeerLost*>(&e);
      if (lost && lost->peer() != 0 && !membership.loop_started()) {
        left = RankLeft(str_cat("the set-up of the stage was interrupted: ", e.what()), lost->peer(),
                        std::max<int64_t>(resume_from_step + job.next_step_after_checkpoint, 0),
                        s.rank0() ? resume_from_step : -1, 0.0);
      } else {
        if (s.rank0()) throw;
        const std::string m = cluster::left_out_message(*s.cur);
        if (m.empty()) throw;
        left_out(str_cat("rank ", s.cur->rank(), ": ", m));
      }
    }
    try {
      if (left) {
        Timer since;
        const int old_world = s.old_world();
        p.lost = left->peer;
        p.step = left->saved;
        cluster::Regrouped g = cluster::regroup(s.cur, s.generation, s.env, s.opts, p);
        if (g.stop)
          fail(left->what(), "; ", g.members.size(), g.members.size() == 1 ? " rank remains" : " ranks remain",
               ", fewer than the ", min_world, " the job needs (--nnodes MIN:MAX), and no node joined within ",
               p.below_min_timeout.count() / 1000.0, " s: the job stops",
               g.step >= 0
                   ? str_cat("; node 0 saved step ", g.step, ": continue later with --resume-from-step ", g.step)
                   : std::string());
        note_checkpoint(s.rank0(), g.step);
        rejoined = describe_leave(*left, g, old_world, job.next_step_after_checkpoint);
        rejoined->since = since;
        rejoined->before = left->seconds;
        resume_from_step = g.step;
        advance(s, g);
      } else if (join) {
        Timer since;
        const int old_world = s.old_world();
        p.step = join->step;
        cluster::Regrouped g = cluster::regroup(s.cur, s.generation, s.env, s.opts, p);
        note_checkpoint(s.rank0(), join->saved);
        rejoined = describe_join(join->step, g, old_world, job.next_step_after_checkpoint);
        rejoined->since = since;
        rejoined->since_what = "after the step boundary";
        resume_from_step = join->step;
        advance(s, g);
      } else {
        rejoin(s, resume_from_step, rejoined, job.next_step_after_checkpoint);
      }
    } catch (const cluster::LeftOut& e) {
      left_out(e.what());
      rejoin(s, resume_from_step, rejoined, job.next_step_after_checkpoint);
    }
  }
}

}  // namespace

void run_elastic(const ElasticJob& job, Communicator& comm, int min_world_size) {
  auto* first = dynamic_cast<cluster::GlooCommunicator*>(&comm);
  NC_CHECK(first || comm.world_size() == 1, "an elastic job needs the Gloo communicator");
  Generations s;
  if (first) {
    s.env = first->env();
    s.opts = first->options();
    s.cur = first;
  } else {  // the job started with node 0 alone (its launcher hosts the store): nodes may join
    s.env = cluster::DistEnv::from_env();
    s.opts = cluster::DistOptions{}.resolved();
  }
  s.generation = s.opts.generation;
  drive(s, job, job.first_resume_step, min_world_size, std::nullopt);
}

void run_elastic_joining(const ElasticJob& job, int min_world_size) {
  Generations s;
  s.env = cluster::DistEnv::from_env();
  s.opts = cluster::DistOptions{}.resolved();
  int64_t resume_from_step = job.first_resume_step;
  std::optional<Rejoined> rejoined;
  rejoin(s, resume_from_step, rejoined, job.next_step_after_checkpoint);
  drive(s, job, resume_from_step, min_world_size, rejoined);
}
#else
void run_elastic(const ElasticJob&, Communicator&, int) {
  fail("an elastic job (--nnodes MIN:MAX) needs the Gloo communicator; this build has none");
}
void run_elastic_joining(const ElasticJob&, int) {
  fail("an elastic job (--nnodes MIN:MAX) needs the Gloo communicator; this build has none");
}
#endif

}  // namespace nanochat
