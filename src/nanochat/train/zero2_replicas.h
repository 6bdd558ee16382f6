#pragma once
// Cross-rank check that the data-parallel replicas of the model are still identical: after every
// optimizer step every rank must hold bit-identical parameters (the reductions give every rank
// the same sums). A difference means a fault on some host (memory, CPU) or a bug, and every
// later step would silently train a different model on each rank.
#include <cstdint>

namespace nanochat {

class Communicator;
class GPT;

/// Hashes each parameter tensor's bytes (CRC32) on every rank and compares the lists across
/// ranks (one small all-gather). On a difference every rank throws the same nanochat::Error at
/// `step` naming the first differing tensor (in params() order), the ranks (with hosts) whose
/// copy differs from rank 0's, and how many tensors differ. World size 1 returns at once. All
/// ranks must call it together.
void check_replicas(const GPT& model, Communicator& comm, int64_t step);

}  // namespace nanochat
