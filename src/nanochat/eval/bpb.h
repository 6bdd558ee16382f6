#pragma once
// Validation bits per byte (nanochat loss_eval.py evaluate_bpb; docs/nanochat.md 3.6).
#include <cstdint>
#include <functional>
#include <vector>

#include "nanochat/data/loader.h"

namespace nanochat {

class GPT;
namespace data {
class DataLoader;
}
class Communicator;

/// bpb = sum of per-token losses (nats) over targets whose token has > 0 bytes, divided by
/// ln 2 x the total bytes of those targets, over the first `steps` (B, T) batches of `read`'s
/// stream. With W ranks every rank must read the same stream (the one-rank val stream): rank r
/// evaluates batches r, r + W, ... (the others are read past, with null pointers) and the sums are
/// all-reduced, so the result does not depend on W (up to double rounding). Deviation from
/// nanochat, whose ranks evaluate their own rank-strided slices (a W-dependent subset of the val
/// shard). token_bytes: (V,) raw bytes per token id (0 for special tokens). Returns +inf if no
/// bytes. progress, if set, is called on this rank after each batch it evaluates with (batches
/// read, steps), 1..steps; it only observes (the result does not depend on it).
double evaluate_bpb(GPT& model, const ValBatchReader& read, int B, int T, int64_t steps,
                    const std::vector<int32_t>& token_bytes, Communicator& comm,
                    const std::function<void(int64_t done, int64_t steps)>& progress = {});

/// Who evaluates: this rank, the world size and the sum over the ranks of a few doubles (in place;
/// collective). The trainer's comes from its StepSync (train/sync.h).
struct EvalRanks {
  int rank = 0;
  int world_size = 1;
  std::function<void(double* v, size_t n)> sum;
};

/// The same, the ranks given by `ranks` (the version above is this one over `comm`).
double evaluate_bpb(GPT& model, const ValBatchReader& read, int B, int T, int64_t steps,
                    const std::vector<int32_t>& token_bytes, const EvalRanks& ranks,
                    const std::function<void(int64_t done, int64_t steps)>& progress = {});

/// The same over a data::DataLoader of the val split (B and T are the loader's).
double evaluate_bpb(GPT& model, data::DataLoader& loader, int64_t steps, const std::vector<int32_t>& token_bytes,
                    Communicator& comm, const std::function<void(int64_t done, int64_t steps)>& progress = {});

}  // namespace nanochat
