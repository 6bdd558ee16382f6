// Reinforcement learning on a task's rewards (contract in chat_rl.h; nanochat scripts/chat_rl.py).
#include "nanochat/train/chat_rl.h"

#include <algorithm>
#include <filesystem>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/checkpoint/run_meta.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/conversation.h"
#include "nanochat/train/membership.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/rl_sync.h"

namespace nanochat {

namespace {
// splitmix64's finaliser: a well-mixed 64-bit function of its input.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t rollout_seed(uint64_t base, int64_t step, int64_t example, int64_t call) {
  uint64_t h = mix64(base);
  h = mix64(h ^ static_cast<uint64_t>(step));
  h = mix64(h ^ static_cast<uint64_t>(example));
  return mix64(h ^ static_cast<uint64_t>(call));
}

RlRollout sample_rollout(Engine& engine, const tasks::Task& task, int64_t example, int64_t step,
                         const RolloutOptions& opt) {
  if (opt.device_batch_size < 1 || opt.num_samples < opt.device_batch_size ||
      opt.num_samples % opt.device_batch_size != 0)
    fail("--num-samples (", opt.num_samples, ") must be a positive multiple of --device-batch-size (",
         opt.device_batch_size, ")");
  const Tokenizer& tok = engine.tokenizer();
  const tasks::Example ex = task.get(example);
  RlRollout r;
  r.example = example;
  const std::vector<int32_t> prompt = render_for_completion(tok, ex.conversation);
  r.prefix_length = static_cast<int64_t>(prompt.size());
  GenerateOptions g;
  g.num_samples = opt.device_batch_size;
  g.max_tokens = opt.max_new_tokens;
  g.temperature = opt.temperature;
  g.top_k = opt.top_k;
  g.tools = true;
  const int calls = opt.num_samples / opt.device_batch_size;
  for (int call = 0; call < calls; ++call) {
    g.seed = rollout_seed(opt.seed, step, example, call);
    const GenerateResult gen = engine.generate(prompt, g);
    for (const GeneratedRow& row : gen.rows) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), row.tokens.begin(), row.tokens.end());
      std::vector<uint8_t> mask(prompt.size(), 0);
      mask.insert(mask.end(), row.sampled.begin(), row.sampled.end());
      r.sequences.push_back(std::move(seq));
      r.masks.push_back(std::move(mask));
      r.rewards.push_back(task.reward(ex, tok.decode(row.tokens)));
    }
  }
  double mean = 0;
  for (double x : r.rewards) mean += x;
  mean /= static_cast<double>(r.rewards.size());
  for (double x : r.rewards) r.advantages.push_back(x - mean);
  return r;
}

double policy_gradient_backward(GPT& model, const RlRollout& r, size_t row_begin, size_t row_end,
                                int64_t passes_times_examples) {
  if (row_begin >= row_end || row_end > r.sequences.size())
    fail("policy gradient: rows [", row_begin, ", ", row_end, ") are not a non-empty range of the ", r.sequences.size(),
         " samples");
  if (passes_times_examples < 1) fail("policy gradient: passes x examples must be >= 1");
  // valid targets per row and of the pass
  std::vector<int64_t> valid(row_end - row_begin, 0);
  int64_t num_valid = 0;
  for (size_t b = row_begin; b < row_end; ++b) {
    const auto& seq = r.sequences[b];
    const auto& mask = r.masks[b];
    if (seq.size() < 2 || mask.size() != seq.size())
      fail("policy gradient: sample ", b, " has ", seq.size(), " tokens and ", mask.size(),
           " mask entries (needs >= 2 tokens and one mask entry per token)");
    for (size_t t = 1; t < seq.size(); ++t) valid[b - row_begin] += mask[t] != 0;
    num_valid += valid[b - row_begin];
  }
  const double denom =
      static_cast<double>(std::max<int64_t>(num_valid, 1)) * static_cast<double>(passes_times_examples);
  double loss = 0;
  std::vector<int32_t> inputs, targets;
  for (size_t b = row_begin; b < row_end; ++b) {
    const double adv = r.advantages[b];
    const int64_t n = valid[b - row_begin];
    if (adv == 0.0 || n == 0) continue;  // contributes nothing to the loss or the gradient
    const auto& seq = r.sequences[b];
    const auto& mask = r.masks[b];
    const int T = static_cast<int>(seq.size() - 1);
    inputs.assign(seq.begin(), seq.end() - 1);
    targets.resize(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) targets[t] = mask[t + 1] ? seq[t + 1] : -1;
    // mean NLL over the row's n targets, scaled so that the gradient is adv * sum NLL / denom
    const double scale = adv * static_cast<double>(n) / denom;
    const float mean_nll = model.forward_backward(inputs.data(), targets.data(), 1, T, static_cast<float>(scale));
    loss += scale * static_cast<double>(mean_nll);
  }
  return loss;
}

namespace {

// One rank's run of chat-rl on a group of ranks (one generation of an elastic job): the steps from
// the resumed one to the last, the evaluations, the saves and node 0's copies, and what a lost
// rank or ranks that join do to it (train/membership.h, as TrainLoop does for base-train).
class RlRun {
 public:
  RlRun(GPT& model, const Tokenizer& tok, const tasks::Task& train, const tasks::Task& val, const ChatRlOptions& opt,
        Communicator& comm, const ChatRlCallbacks& cb, Membership& membership);
  void run();

 private:
  void run_steps();
  void train_step();
  void save();
  void keep_copy_if_due();
  [[noreturn]] void admit_joiners();
  [[noreturn]] void stop_after_loss(const PeerLost& e);
  LoopState state() const;

  GPT& model_;
  const tasks::Task& train_;
  const tasks::Task& val_;
  const ChatRlOptions& opt_;
  const ChatRlCallbacks& cb_;
  Membership& membership_;
  const int E_;
  const int64_t num_steps_;
  const int num_passes_;
  RlStepSync sync_;
  Engine engine_;
  const FaultInjector& faults_;
  RunMeta run_meta_;
  MetricsLog metrics_;
  int64_t step_ = 0;         // the step in progress
  int64_t last_saved_ = -1;  // the last checkpoint on disk (its step: the weights after it)
  int64_t copied_ = -1;      // the step node 0 last copied
  bool join_due_ = false;    // ranks join after this step (membership)
  const char* phase_ = "starting";
};

int64_t rl_num_steps(const tasks::Task& train, const ChatRlOptions& opt) {
  const int E = opt.examples_per_step;
  if (E < 1) fail("--examples-per-step (", E, ") must be positive");
  const int64_t n = opt.num_steps > 0 ? opt.num_steps : train.size() / E * opt.num_epochs;
  if (n < 1)
    fail(train.name(), " has ", train.size(), " examples: fewer than --examples-per-step (", E, ") x --num-epochs (",
         opt.num_epochs, ") leaves no step");
  const RolloutOptions& ro = opt.rollout;
  if (ro.device_batch_size < 1 || ro.num_samples < ro.device_batch_size || ro.num_samples % ro.device_batch_size)
    fail("--num-samples (", ro.num_samples, ") must be a positive multiple of --device-batch-size (",
         ro.device_batch_size, ")");
  return n;
}

OptimConfig rl_optim(const GPT& model, const ChatRlOptions& opt) {
  OptimConfig oc;
  oc.unembedding_lr = opt.unembedding_lr;
  oc.embedding_lr = opt.embedding_lr;
  oc.matrix_lr = opt.matrix_lr;
  oc.scalar_lr = opt.scalar_lr;
  oc.weight_decay = opt.weight_decay;
  oc.model_dim = model.config().n_embd;
  return oc;
}

// What the run's checkpoints record: opt.meta (the model's config when it has none) and the world size.
RunMeta rl_run_meta(const ChatRlOptions& opt, const GPT& model, int world_size) {
  nlohmann::json j = opt.meta.is_object() ? opt.meta : nlohmann::json::object();
  if (!j.contains("model_config")) j["model_config"] = model.config().to_json();
  RunMeta m = RunMeta::from_json(j, "chat-rl's meta");
  m.world_size = world_size;
  return m;
}

RlRun::RlRun(GPT& model, const Tokenizer& tok, const tasks::Task& train, const tasks::Task& val,
             const ChatRlOptions& opt, Communicator& comm, const ChatRlCallbacks& cb, Membership& membership)
    : model_(model),
      train_(train),
      val_(val),
      opt_(opt),
      cb_(cb),
      membership_(membership),
      E_(opt.examples_per_step),
      num_steps_(rl_num_steps(train, opt)),
      num_passes_(opt.rollout.num_samples / opt.rollout.device_batch_size),
      sync_(model, rl_optim(model, opt), comm, opt.examples_per_step, opt.balance),
      engine_(model, tok),
      faults_(opt.faults != nullptr ? *opt.faults : no_faults()),
      run_meta_(rl_run_meta(opt, model, comm.world_size())),
      metrics_(opt.checkpoint_dir.empty() ? std::string() : opt.checkpoint_dir + "/metrics.jsonl",
               comm.rank() == 0 && !opt.checkpoint_dir.empty(), opt.resume_from_step) {}

LoopState RlRun::state() const {
  LoopState s;
  s.step = step_;
  return s;
}

// A rank lost in a collective (it died, froze or was cut off): node 0 writes its copy when it is
// newer than the last checkpoint; an elastic job goes on without the rank (the membership throws),
// else the run stops naming what is saved.
void RlRun::stop_after_loss(const PeerLost& e) {
  const Timer caught;
  membership_.peer_lost(e, step_, sync_.world_size(), metrics_);
  std::string copy_error;
  if (copied_ > last_saved_) try {
      if (sync_.save_copy(opt_.checkpoint_dir) == copied_) last_saved_ = copied_;
    } catch (const std::exception& s) {
      copy_error = str_cat(" (node 0 could not save its copy of step ", copied_, ": ", s.what(), ")");
    }
  const bool rank0 = sync_.rank() == 0;
  membership_.go_on_without(
      PeerLoss{e, step_, phase_, rank0 ? last_saved_ : -1, caught.seconds(), !copy_error.empty()});
  const int64_t saved = rank0 ? last_saved_ : std::max(last_saved_, copied_);
  fail("chat-rl stopped in step ", step_, " (", phase_, "): ", e.what(), copy_error, ". ",
       saved >= 0 ? str_cat("The last checkpoint is step ", saved, " in node 0's ", opt_.checkpoint_dir,
                            ": to continue, run the same command with --resume-from-step ", saved,
                            sync_.world_size() > 1 ? " (under nanochat run: on the nodes still here, with --nnodes "
                                                     "set to their number; the optimizer state is dealt to any number "
                                                     "of ranks)"
                                                   : "")
                  : std::string("No checkpoint of this run was saved yet"));
}

void RlRun::run() {
  if (opt_.resume_from_step >= 0) {
    sync_.resume(CheckpointPaths{opt_.checkpoint_dir, opt_.resume_from_step});
    last_saved_ = opt_.resume_from_step;
  }
  if (opt_.resume_from_step + 1 >= num_steps_) {
    print_line_if(sync_.rank() == 0, str_cat("chat-rl: checkpoint ", opt_.resume_from_step, " is the run's last step (",
                                             num_steps_, " steps): nothing is left to train"));
    return;
  }
  step_ = opt_.resume_from_step + 1;
  model_.zero_grad();  // the first step's gradients are its own
  membership_.started(metrics_, sync_.rank() == 0);
  try {
    run_steps();
  } catch (const PeerLost& e) {
    stop_after_loss(e);
  }
}

void RlRun::run_steps() {
  for (; step_ < num_steps_; ++step_) {
    phase_ = "evaluating";
    if (opt_.eval_every > 0 && step_ % opt_.eval_every == 0) {
      const RolloutOptions& ro = opt_.rollout;
      const std::vector<double> pk =
          pass_at_k(engine_, val_, ro.device_batch_size, opt_.eval_examples, 256, 1.0, 50, sync_.comm());
      metrics_.record({{"step", step_}, {"pass@k", pk}});
      if (cb_.on_eval) cb_.on_eval(step_, pk);
    }
    phase_ = "training the step";
    train_step();
    const bool last = step_ == num_steps_ - 1;
    phase_ = "saving the checkpoint";
    if ((step_ > 0 && opt_.save_every > 0 && step_ % opt_.save_every == 0) || last) save();
    if (last) return;
    keep_copy_if_due();
    if (join_due_) admit_joiners();
  }
}

void RlRun::train_step() {
  const RolloutOptions& ro = opt_.rollout;
  ChatRlStep s;
  s.step = step_;
  s.num_steps = num_steps_;
  s.split = sync_.split();
  const RlShare share = sync_.begin_step();
  RlRankStep mine;
  Timer step_timer;
  for (int64_t e = 0; e < share.count; ++e) {
    Timer t;
    const int64_t example = (step_ * E_ + share.first + e) % train_.size();
    const RlRollout r = sample_rollout(engine_, train_, example, step_, ro);
    for (int p = 0; p < num_passes_; ++p) {
      const size_t b0 = static_cast<size_t>(p) * ro.device_batch_size;
      s.loss +=
          policy_gradient_backward(model_, r, b0, b0 + ro.device_batch_size, static_cast<int64_t>(num_passes_) * E_);
    }
    double mean = 0;
    for (double x : r.rewards) mean += x;
    mine.reward_sum += mean / static_cast<double>(r.rewards.size());
    for (const auto& seq : r.sequences) mine.length_sum += static_cast<double>(seq.size());
    mine.samples += static_cast<double>(r.sequences.size());
    mine.examples += 1;
    faults_.after_micro_batch(sync_.rank(), t.seconds());  // the tests' slower machine
    mine.seconds += t.seconds();
  }
  s.lrm = 1.0 - static_cast<double>(step_) / static_cast<double>(num_steps_);
  mine.joiners = membership_.joiners_waiting();
  // every problem's loss is already divided by the step's passes x problems: the ranks' sum is the mean
  std::vector<RlRankStep> ranks;
  const RlRankStep sum =
      sync_.finish(mine, StepSchedule{static_cast<float>(opt_.init_lr_frac * s.lrm), 0.95f, opt_.weight_decay}, &ranks);
  faults_.after_update(model_, sync_.rank(), step_);
  StepStats joins;  // the membership reads rank 0's count of the ranks that ask to join
  joins.ranks.resize(1);
  joins.ranks[0].joiners = ranks[0].joiners;
  join_due_ = membership_.join_due(joins);
  nlohmann::json rank_examples = nlohmann::json::array();
  for (const RlRankStep& x : ranks) {
    s.rank_seconds.push_back(x.seconds);
    rank_examples.push_back(x.examples);
  }
  s.mean_reward = sum.reward_sum / E_;
  s.mean_sequence_length = sum.samples > 0 ? sum.length_sum / sum.samples : 0.0;
  nlohmann::json rec = {{"step", step_},
                        {"mean_reward", s.mean_reward},
                        {"mean_sequence_length", s.mean_sequence_length},
                        {"lrm", s.lrm},
                        {"dt_ms", step_timer.seconds() * 1e3}};
  if (ranks.size() > 1) rec["rank_examples"] = rank_examples;
  metrics_.record(rec);
  if (cb_.on_step) cb_.on_step(s);
}

// The checkpoint of this step (the weights after it, as nanochat's chat_rl.py names them), with
// every rank's optimizer shard so that the run can be continued from it.
void RlRun::save() {
  if (opt_.checkpoint_dir.empty()) return;
  sync_.save(opt_.checkpoint_dir, run_meta_, state(), faults_);
  last_saved_ = step_;
  if (cb_.on_save && sync_.rank() == 0) cb_.on_save(step_, opt_.checkpoint_dir);
}

// Node 0 keeps the job's state after this step (copy_state_every): a rank lost later costs no step
// before it.
void RlRun::keep_copy_if_due() {
  if (opt_.copy_state_every <= 0 || opt_.checkpoint_dir.empty() || (step_ + 1) % opt_.copy_state_every != 0) return;
  phase_ = "sending node 0 the copy of the job's state";
  sync_.keep_copy(run_meta_, state());
  copied_ = step_;
}

// Ranks ask to join (every rank saw it in the step's statistics): node 0 writes the state after
// this step and the membership ends this run here (train/membership.h).
void RlRun::admit_joiners() {
  phase_ = "saving the state for the ranks that join";
  if (copied_ == step_ && sync_.world_size() > 1) {
    if (sync_.save_copy(opt_.checkpoint_dir) == copied_) last_saved_ = copied_;  // rank 0; no collective
  } else if (last_saved_ != step_) {
    save();
  }
  membership_.admit_joiners(step_, sync_.rank() == 0 ? last_saved_ : -1);  // throws
  fail("internal: the job's membership admitted no rank after step ", step_);
}

}  // namespace

void run_chat_rl(GPT& model, const Tokenizer& tok, const tasks::Task& train, const tasks::Task& val,
                 const ChatRlOptions& opt, Communicator& comm, const ChatRlCallbacks& cb, Membership* membership) {
  if (comm.rank() == 0 && !opt.checkpoint_dir.empty()) std::filesystem::create_directories(opt.checkpoint_dir);
  FixedMembership fixed;
  RlRun(model, tok, train, val, opt, comm, cb, membership != nullptr ? *membership : fixed).run();
}

}  // namespace nanochat
