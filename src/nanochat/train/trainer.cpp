#include "nanochat/train/trainer.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/loop_checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/peak.h"
#include "nanochat/core/profile.h"
#include "nanochat/core/threads.h"
#include "nanochat/data/verify.h"
#include "nanochat/feed/step_source.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/eval_hooks.h"
#include "nanochat/train/job_layout.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/report.h"
#include "nanochat/train/run_summary.h"
#include "nanochat/train/sync_factory.h"
#include "nanochat/train/train_loop.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// The start-up lines: run, device, vocab, model, the plan's derivations, the MFU reference peak.
// `reads_data`: this rank reads the shards (it checks them first).
double print_setup_and_measure_peak(const BaseTrainArgs& a, const Tokenizer& tok, const TrainPlan& plan, bool master,
                                    bool reads_data) {
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  print0("nanochat.cpp base-train");
  print_device_lines(plan, tok, master, a.threads == 0 && num_threads() > 1);
  for (auto& l : plan.log) print0(l);
  if (reads_data) data::check_training_shards(data_dir(), a.skip_data_check, master);  // a corrupt page stops here
  return measure_and_print_peak(master, plan.dtype);
}

void train(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults, DataFeed& feed,
           Membership& membership) {
  const int rank = comm.rank(), W = comm.world_size();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  // A regrouped elastic job has said the start-up lines once already.
  const bool regrouped = membership.regrouped();

  // Tokenizer, derived plan, start-up report.
  const Tokenizer tok = load_tokenizer(feed);
  const TrainPlan plan = derive_plan(a, tok.vocab_size(), W, base_dir());
  const double peak_gflops = print_setup_and_measure_peak(a, tok, plan, master && !regrouped, !feed.client);
  if (feed.server && !regrouped)
    print0(str_cat("Data: node 0 reads ", data_dir(), " and sends every rank its rows (port ", feed.port(),
                   "); --local-data makes every node read its own copy"));

  // Model and optimizer (docs/nanochat.md 2.1: lrs x batch_lr_scale, Muon wd scaled; TrainPlan::optim).
  GPT model(plan.model);
  model.init_weights(a.seed);
  model.set_recompute_mlp(a.recompute_mlp);
  model.set_compute_dtype(plan.dtype);
  if (!regrouped) print0(plan.dmodel_lr_scale_line());
  prof::reset();

  // The whole job, agreed by every rank before any collective on tensors (job_layout.h); then
  // the mode of --sync with its optimizer (train/sync_factory.h).
  const JobLayout layout = agree_on_job_layout(comm, a, plan, tok);
  const std::unique_ptr<StepSync> sync = make_step_sync(plan, layout, model, comm);
  RunMeta run;
  run.model_config = plan.model;
  run.data_stream = "one-rank";
  run.user_config = args_to_json(a);
  run.device_batch_size = plan.B;
  run.max_seq_len = plan.T;
  run.total_batch_size = plan.total_batch_size;
  run.world_size = plan.world_size;
  run.dtype = compute_dtype_name(plan.dtype);
  run.tokenizer_hash = std::to_string(tok.hash());
  TrainJob job{plan,        layout,   tok, model, *sync, token_row_stream(tok, plan), run, a.resume_from_step,
               peak_gflops, a.profile};
  job.adapt_threads = a.threads == 0 && num_threads() > 1;
  job.membership = &membership;
  job.extra_eval = core_metric_hook(a.core_metric_every, a.core_metric_max_per_task, model, tok, comm, regrouped);
  run_train_job(job, comm, faults, feed);
}

}  // namespace

void print_device_lines(const TrainPlan& plan, const Tokenizer& tok, bool master, bool adapt_threads) {
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  print0(str_cat("Device: cpu, dtype ", compute_dtype_name(plan.dtype),
                 plan.dtype == ComputeDtype::BFloat16
                     ? " (bf16 matrix products with fp32 accumulation; fp32 weights, optimizer state and the rest)"
                     : "",
                 ", ", num_threads(), " threads per rank, world size ", plan.world_size));
  print0(str_cat("Threads: ", num_threads(), " on CPUs ", cpu_affinity_list(), "; wait policy ", wait_policy_summary(),
                 adapt_threads
                     ? "; fewer while the steps measure faster with fewer (a busy core), --threads N fixes the count"
                     : ""));
  print0("Vocab size: " + with_commas(tok.vocab_size()));
  print0("Model config: " + plan.model.to_json().dump());
}

double measure_and_print_peak(bool master, ComputeDtype dtype) {
  const std::string peak_cache = base_dir() + "/fma_peak.json";
  const PeakKind kind = dtype == ComputeDtype::BFloat16 ? PeakKind::Bf16Dot : PeakKind::Fp32Fma;
  const MfuPeak peak = measure_mfu_peak(num_threads(), peak_cache, kind);
  print_line_if(master, str_cat("Measured ", kind == PeakKind::Bf16Dot ? "bf16 dot-product (vdpbf16ps)" : "fp32 FMA",
                                " peak of this rank: ", static_cast<int64_t>(peak.measured), " GFLOP/s (",
                                fma_peak_isa(kind), ", ", num_threads(),
                                " threads); MFU is reported against the highest peak seen on "
                                "this machine (at least threads x the 1-thread peak, up to the physical cores), ",
                                static_cast<int64_t>(peak.reference), " GFLOP/s (", peak_cache, "), x world size"));
  return peak.reference;
}

void run_train_job(const TrainJob& job, Communicator& comm, const FaultInjector& faults, DataFeed& feed) {
  const int rank = comm.rank();
  const bool master = rank == 0;
  auto print0 = [master](const std::string& s) { print_line_if(master, s); };
  const TrainPlan& plan = job.plan;
  const JobLayout& layout = job.layout;
  // Each step's rows are dealt to the ranks from the one data stream; the job's sync keeps them
  // one model (train/sync.h).
  StepSync& sync = job.sync;
  LoopState st;  // docs/nanochat.md 3.9 loop_state
  if (job.resume_from_step >= 0) st = sync.resume(plan, job.resume_from_step);

  const std::unique_ptr<StepSource> data =
      open_step_source(feed, job.stream, plan, st.loader_state.is_null() ? nullptr : &st.loader_state, st.step, rank);
  // Node 0 can write its checkpoint folder (it writes whole checkpoints), else all stop now.
  prepare_checkpoint_dirs(comm, plan.checkpoint_dir);
  MetricsLog metrics(plan.checkpoint_dir + "/metrics.jsonl", master, job.resume_from_step >= 0 ? st.step : -1);
  if (const std::string line = sync.describe(); !line.empty()) print0(line);
  FixedMembership fixed;
  Membership& membership = job.membership ? *job.membership : fixed;
  membership.started(metrics, master);  // a regrouped elastic job: who left, and how long it took to go on

  TrainContext ctx{plan,
                   layout,
                   job.tok,
                   job.model,
                   sync,
                   *data,
                   metrics,
                   st,
                   faults,
                   job.run_meta,
                   job.peak_gflops,
                   job.profile,
                   job.adapt_threads,
                   membership,
                   job.step_log,
                   job.extra_eval};
  TrainLoop loop(ctx);
  const std::string eval_error = loop.run();

  // End of run: summary and chart.
  print0(str_cat("Total training time: ", st.total_training_time / 60.0, "m"));
  if (job.profile && loop.profiled_steps() > 0)
    for (const auto& l : profile_report_lines(rank, loop.profiled_steps(), loop.profiled_seconds())) print0(l);
  if (std::isfinite(st.min_val_bpb)) print0(str_cat("Minimum validation bpb: ", st.min_val_bpb));
  if (job.step_log.summary && master && loop.stream_state().is_object())
    print0(job.step_log.summary(loop.stream_state()));
  metrics.write_chart(plan.checkpoint_dir + "/report.svg", plan.command + " " + plan.tag);
  print0("Wrote " + plan.checkpoint_dir + "/report.svg and " + metrics.path());
  report_training_run(plan, st, metrics.path(), comm);
  if (!eval_error.empty()) fail("the final evaluation failed after the weights were saved: ", eval_error);
}

namespace {

// While it lives, a lost peer (Communicator::on_peer_lost) reaches the data feed, so that a wait
// for rank 0's frames, or rank 0's send to the lost rank, ends at once. The communicator outlives
// the feed: the hook holds a state this guard empties.
class FeedLossHook {
 public:
  FeedLossHook(Communicator& comm, DataFeed& feed) : s_(std::make_shared<State>()) {
    s_->feed = &feed;
    comm.on_peer_lost([s = s_](int peer, const std::string& why) {
      std::lock_guard<std::mutex> lk(s->mu);
      if (s->feed) s->feed->peer_lost(peer, why);
    });
  }
  ~FeedLossHook() {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->feed = nullptr;
  }
  FeedLossHook(const FeedLossHook&) = delete;
  FeedLossHook& operator=(const FeedLossHook&) = delete;

 private:
  struct State {
    std::mutex mu;
    DataFeed* feed = nullptr;
  };
  std::shared_ptr<State> s_;
};

}  // namespace

void with_data_feed(Communicator& comm, bool local_data, const std::function<void(DataFeed&)>& body) {
  DataFeed feed = open_data_feed(comm, local_data);
  const FeedLossHook feed_loss(comm, feed);
  try {
    body(feed);
  } catch (const MembershipChange&) {
    throw;  // the job goes on with another group of ranks (train/elastic.h)
  } catch (const std::exception& e) {
    feed.tell_workers(e.what());  // every node then shows node 0's error
    throw;
  }
}

void run_base_train_job(const BaseTrainArgs& a, Communicator& comm, const FaultInjector& faults,
                        Membership& membership) {
  with_data_feed(comm, a.local_data, [&](DataFeed& feed) { train(a, comm, faults, feed, membership); });
}

}  // namespace nanochat
