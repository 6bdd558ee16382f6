#pragma once
// The optimizer state in nanochat's (PyTorch) layout: optim_<S:06d>_rank<r>.pt, torch.save of
// MuonAdamW.state_dict() on rank r (nanochat optim.py MuonAdamW, gpt.py setup_optimizer,
// checkpoint_manager.py save_checkpoint; docs/nanochat.md 2.1-2.4 and 3.9):
//   {"state": {i: per-parameter state}, "param_groups": [group, ...]}
// with i the parameter's position counting through the groups in order (torch.optim numbering).
//   AdamW parameter i: {"step": int, "exp_avg": T, "exp_avg_sq": T}, T of the parameter's shape,
//     or of its rows [r*R/W, (r+1)*R/W) on rank r of W > 1 ranks when it has >= 1024 elements.
//   Muon group (K matrices (m, n)), keyed by its first parameter i: {"momentum_buffer": (c, m, n),
//     "second_momentum_buffer": (c, m, 1) if m >= n else (c, 1, n)}, c = K on one rank, else
//     ceil(K/W) with rank r holding matrices [r*c, min(K, (r+1)*c)) (the rest is zero padding).
//   AdamW group: {"kind": "adamw", "lr", "betas": (b1, b2), "eps", "weight_decay", "initial_lr",
//     "params": [i, ...]}; Muon group: {"kind": "muon", "lr", "momentum", "ns_steps", "beta2",
//     "weight_decay", "initial_lr", "params"}.
// Our optimizer's groups are nanochat's (optim/muon_adamw.h) and hold the model's parameters in the
// model's order; nanochat lists the smear group's as smear_gate.weight, smear_lambda,
// backout_lambda (nanochat_param_names), and the files are numbered that way.
#include <string>
#include <vector>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"

namespace nanochat {

/// The names of group g's parameters in nanochat's order (the order of their numbers in the files).
std::vector<std::string> nanochat_param_names(const OptGroup& g);

/// Writes `whole` (the state of an optimizer shaped like `opt`) as nanochat's one-rank
/// optim_<S>_rank0.pt at `path` (written directly; callers rename). The group fields (lr,
/// momentum, weight_decay, ...) are those of `groups` (opt.groups() when empty; otherwise one per
/// group of opt, e.g. scheduled_groups()). Throws nanochat::Error naming the path when it cannot
/// be written or `whole` does not fit `opt`.
void save_nanochat_optimizer(const std::string& path, const MuonAdamW& opt, const MuonAdamW::WholeState& whole,
                             const std::vector<OptGroup>& groups = {});

/// Reads nanochat's optimizer files of one step, rank_files[r] = optim_<S>_rank<r>.pt of a run on
/// rank_files.size() ranks, into the whole state of `opt` (whose parameters are the checkpoint's
/// model). F32 and BF16 tensors are read (BF16 widened). A file whose "state" is empty (an
/// optimizer that never stepped) gives zeros. Throws nanochat::Error naming the file and the key
/// for anything unexpected: another number or kind of groups or parameters, a missing entry, a
/// tensor of another shape or dtype, a value of the wrong type.
MuonAdamW::WholeState load_nanochat_optimizer(const std::vector<std::string>& rank_files, const MuonAdamW& opt);

/// The base_train plan of a checkpoint's meta: its user_config (base-train's or nanochat's flags;
/// a missing flag takes its default) derived again with the model's vocabulary size and the
/// meta's world size (plan/plan.h derive_plan). Gives the scaled lrs, the scaled Muon weight
/// decay and the schedule nanochat's scripts/base_train.py ran under. Throws nanochat::Error
/// naming `meta_path` when the flags do not derive (e.g. a batch not divisible by B*T).
TrainPlan plan_of_meta(const RunMeta& meta, const std::string& meta_path);

/// The optimizer settings of a checkpoint, from its meta: plan_of_meta's lrs (the flags times
/// sqrt(total_batch_size / 2^19)) and scaled Muon weight decay -- what base_train constructs its
/// MuonAdamW with. A meta without user_config gives the defaults with the batch lr scale.
OptimConfig optim_config_of_meta(const RunMeta& meta, int64_t model_dim);

/// opt's groups as nanochat's base_train leaves them in optimizer.state_dict()["param_groups"]
/// after `step` S (the checkpoint's step) (scripts/base_train.py sets them before each optimizer.step() at
/// it = 0..S-1): lr = initial_lr * get_lr_multiplier(S-1) for every group and, for Muon,
/// momentum = get_muon_momentum(S-1), weight_decay = get_weight_decay(S-1) =
/// wd_scaled * 0.5 * (1 + cos(pi * (S-1) / N)). At S = 0 the construction values (initial lr,
/// momentum 0.95, wd_scaled). `opt` must be built with optim_config_of_meta(meta). Throws like
/// plan_of_meta.
std::vector<OptGroup> scheduled_groups(const MuonAdamW& opt, const RunMeta& meta, int64_t step,
                                       const std::string& meta_path);

/// The whole optimizer state of the checkpoint `lm` (all optim_<S>_rank<r>.safetensors of its
/// world size, checked against the step's checksums), for `opt` built over lm's model. Throws
/// nanochat::Error naming the missing or corrupt file.
MuonAdamW::WholeState read_checkpoint_optimizer(const LoadedModel& lm, const MuonAdamW& opt);

}  // namespace nanochat
