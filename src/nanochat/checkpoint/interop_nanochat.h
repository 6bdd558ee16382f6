#pragma once
// Moving checkpoints between nanochat.cpp and Karpathy's nanochat (PyTorch), in both directions
// (nanochat checkpoint_manager.py save_checkpoint / load_checkpoint / build_model, tokenizer.py
// RustBPETokenizer.save / from_directory; docs/nanochat.md 3.9 and 6.2).
//
// nanochat's layout under a base folder:
//   base_checkpoints/<tag>/model_<S:06d>.pt   torch.save of the state_dict (core/torch_file.h)
//   base_checkpoints/<tag>/meta_<S:06d>.json  step, val_bpb, model_config, user_config, batch
//                                             settings, dataloader_state_dict, loop_state
//   tokenizer/tokenizer.pkl                   pickled tiktoken Encoding (tokenizer/tiktoken_pickle.h)
//   tokenizer/token_bytes.pt                  int32 (V,) raw byte length of each token
// The state_dict keys and shapes are the ones this product already uses (docs/nanochat.md 1.2),
// so weights move unchanged. The optimizer state moves too (checkpoint/interop_optim.h):
//   base_checkpoints/<tag>/optim_<S:06d>_rank<r>.pt  torch.save of MuonAdamW.state_dict() per rank
// export writes it for one rank (optional); import reads every rank's file when there are any and
// otherwise starts a fresh (zero) optimizer state. The imported data loader starts at the
// beginning of the data (nanochat's loader position is not ours); `base-train --resume-from-step
// S` continues from the imported weights, optimizer state and loop state.
#include <cstdint>
#include <string>

#include "nanochat/checkpoint/model_io.h"

namespace nanochat {

struct ExportOptions {
  std::string tag;              ///< checkpoint tag under base_dir()/base_checkpoints ("" = the default)
  int64_t step = -1;            ///< -1 = the last complete step
  std::string out;              ///< the nanochat base folder to write into (created)
  bool with_optimizer = false;  ///< also write optim_<S>_rank0.pt (the whole state of every shard)
  /// which stage's checkpoint (-i): its folder is read here and written under opts.out (base only
  /// with the optimizer)
  CheckpointSource source = CheckpointSource::Base;
};

/// Writes the checkpoint (and the tokenizer of base_dir()/tokenizer) in nanochat's layout under
/// opts.out; every file is written under a temporary name and renamed. Returns the model file
/// written. Throws nanochat::Error naming the file when the checkpoint or tokenizer cannot be
/// read or their vocabularies differ, when an optimizer shard is missing or corrupt, or when a
/// file cannot be written.
std::string export_to_nanochat(const ExportOptions& opts);

struct ImportOptions {
  std::string from;   ///< nanochat base folder (holding base_checkpoints/ and tokenizer/)
  std::string tag;    ///< "" = the d<N> folder with the largest N (nanochat find_largest_model)
  int64_t step = -1;  ///< -1 = the largest step with a model_<S>.pt (nanochat find_last_step)
};

/// What an import wrote.
struct ImportResult {
  std::string tag;
  int64_t step = 0;
  std::string model_file;   ///< the safetensors written under base_dir()
  int optimizer_ranks = 0;  ///< nanochat optimizer files read (0: none, the optimizer starts fresh)
};

/// Reads a nanochat checkpoint (fp32 or bf16 tensors; bf16 widened to fp32) and its tokenizer and
/// writes them as a complete checkpoint of this product under base_dir()/base_checkpoints/<tag>/
/// and base_dir()/tokenizer. Throws nanochat::Error naming the file (and the key) for anything
/// unexpected: a missing file, an optimizer file that does not fit the model (interop_optim.h), ranks
/// missing from optim_<S>_rank<r>.pt, a key missing from or unknown to the model, a shape that differs
/// from the meta's model_config, an unsupported dtype, a corrupt file, a tokenizer whose vocabulary
/// or token_bytes.pt disagree, a different tokenizer already in base_dir()/tokenizer, or a step
/// that already exists under the destination tag.
ImportResult import_from_nanochat(const ImportOptions& opts);

}  // namespace nanochat
