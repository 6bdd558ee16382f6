// Reinforcement learning on a task's rewards (contract in chat_rl.h; nanochat scripts/chat_rl.py).
#include "nanochat/train/chat_rl.h"

#include <algorithm>
#include <filesystem>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/timer.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tokenizer/conversation.h"
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
// Rank 0: the weights and meta of `step`, then the completion marker with their CRC32s.
void save_rl_checkpoint(const GPT& model, const ChatRlOptions& opt, int64_t step) {
  const CheckpointPaths cp{opt.checkpoint_dir, step};
  begin_checkpoint(cp);
  std::vector<StWriteEntry> entries;
  for (const auto& p : model.params()) entries.push_back({p.name, "F32", p.shape, model.param_data() + p.offset});
  write_safetensors_atomic(cp.model(), entries, {{"format", "nanochat.cpp"}});
  nlohmann::json meta = opt.meta;
  meta["step"] = step;
  write_file_atomic(cp.meta(), meta.dump(2));
  nlohmann::json crcs = nlohmann::json::object();
  for (const std::string& path : {cp.model(), cp.meta()})
    crcs[std::filesystem::path(path).filename().string()] = file_crc32(path);
  finish_checkpoint(cp, crcs, 1);
}

}  // namespace

void run_chat_rl(GPT& model, const Tokenizer& tok, const tasks::Task& train, const tasks::Task& val,
                 const ChatRlOptions& opt, Communicator& comm, const ChatRlCallbacks& cb) {
  const int rank = comm.rank();
  const int E = opt.examples_per_step;
  if (E < 1) fail("--examples-per-step (", E, ") must be positive");
  const int64_t num_steps = opt.num_steps > 0 ? opt.num_steps : train.size() / E * opt.num_epochs;
  if (num_steps < 1)
    fail(train.name(), " has ", train.size(), " examples: fewer than --examples-per-step (", E, ") x --num-epochs (",
         opt.num_epochs, ") leaves no step");
  const RolloutOptions& ro = opt.rollout;
  if (ro.device_batch_size < 1 || ro.num_samples < ro.device_batch_size || ro.num_samples % ro.device_batch_size)
    fail("--num-samples (", ro.num_samples, ") must be a positive multiple of --device-batch-size (",
         ro.device_batch_size, ")");
  const int num_passes = ro.num_samples / ro.device_batch_size;

  OptimConfig oc;
  oc.unembedding_lr = opt.unembedding_lr;
  oc.embedding_lr = opt.embedding_lr;
  oc.matrix_lr = opt.matrix_lr;
  oc.scalar_lr = opt.scalar_lr;
  oc.weight_decay = opt.weight_decay;
  oc.model_dim = model.config().n_embd;
  RlStepSync sync(model, oc, comm, E, opt.balance);
  Engine engine(model, tok);
  model.zero_grad();
  const FaultInjector& faults = opt.faults != nullptr ? *opt.faults : no_faults();

  for (int64_t step = 0; step < num_steps; ++step) {
    if (opt.eval_every > 0 && step % opt.eval_every == 0) {
      const std::vector<double> pk =
          pass_at_k(engine, val, ro.device_batch_size, opt.eval_examples, 256, 1.0, 50, comm);
      if (cb.on_eval) cb.on_eval(step, pk);
    }
    ChatRlStep s;
    s.step = step;
    s.num_steps = num_steps;
    s.split = sync.split();
    const RlShare share = sync.begin_step();
    RlRankStep mine;
    for (int64_t e = 0; e < share.count; ++e) {
      Timer t;
      const int64_t example = (static_cast<int64_t>(step) * E + share.first + e) % train.size();
      const RlRollout r = sample_rollout(engine, train, example, step, ro);
      for (int p = 0; p < num_passes; ++p) {
        const size_t b0 = static_cast<size_t>(p) * ro.device_batch_size;
        s.loss +=
            policy_gradient_backward(model, r, b0, b0 + ro.device_batch_size, static_cast<int64_t>(num_passes) * E);
      }
      double mean = 0;
      for (double x : r.rewards) mean += x;
      mine.reward_sum += mean / static_cast<double>(r.rewards.size());
      for (const auto& seq : r.sequences) mine.length_sum += static_cast<double>(seq.size());
      mine.samples += static_cast<double>(r.sequences.size());
      mine.examples += 1;
      faults.after_micro_batch(sync.rank(), t.seconds());  // the tests' slower machine
      mine.seconds += t.seconds();
    }
    s.lrm = 1.0 - static_cast<double>(step) / static_cast<double>(num_steps);
    // every problem's loss is already divided by the step's passes x problems: the ranks' sum is the mean
    std::vector<RlRankStep> ranks;
    const RlRankStep sum =
        sync.finish(mine, StepSchedule{static_cast<float>(opt.init_lr_frac * s.lrm), 0.95f, opt.weight_decay}, &ranks);
    for (const RlRankStep& x : ranks) s.rank_seconds.push_back(x.seconds);
    s.mean_reward = sum.reward_sum / E;
    s.mean_sequence_length = sum.samples > 0 ? sum.length_sum / sum.samples : 0.0;
    if (cb.on_step) cb.on_step(s);
    const bool save = (step > 0 && opt.save_every > 0 && step % opt.save_every == 0) || step == num_steps - 1;
    if (save && !opt.checkpoint_dir.empty() && rank == 0) {
      save_rl_checkpoint(model, opt, step);
      if (cb.on_save) cb.on_save(step, opt.checkpoint_dir);
    }
  }
}

}  // namespace nanochat
