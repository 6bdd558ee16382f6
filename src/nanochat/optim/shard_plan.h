#pragma once
// Who does which part of the optimizer step, in proportion to the ranks' measured speeds
// (docs/architecture.md 3.8): a slower machine gets a smaller share of the ZeRO-2 update, so that
// no rank waits for it in every step.
//  * AdamW (large, row-sharded tensors): rank r owns a contiguous range of rows, rank 0 first,
//    its length in proportion to speed[r] (largest remainders, ties to the lower rank).
//  * Muon: every matrix of a group is owned whole by one rank (the Polar Express iteration needs
//    the whole matrix). Matrices are dealt by longest processing time first: the next most
//    expensive matrix goes to the rank that would finish it earliest (load + cost) / speed, ties to
//    the lower rank. Cost of one matrix (m, n): ns_steps * m * n * min(m, n) (the Polar Express
//    matrix products); cost of an AdamW row: its elements.
// Pure functions of their arguments: every rank holds the same speeds (train/balance.h) and
// derives the same plan with no message. The update math is per row and per matrix, so the
// parameters after a step do not depend on the plan.
#include <cstdint>
#include <vector>

namespace nanochat {

/// rows split over the ranks in proportion to `speeds` (each > 0 and finite; size = world size).
/// Returns the rows per rank (sum = rows; a rank of speed s gets floor or ceil of rows*s/sum).
/// Throws nanochat::Error for an empty or non-positive speed vector or rows < 0.
std::vector<int64_t> proportional_rows(int64_t rows, const std::vector<double>& speeds);

/// Owner rank of each item (costs[i] >= 0) by longest processing time first: items by cost
/// descending (ties: lower index first) each to the rank whose finishing time
/// (assigned cost + this cost) / speed is least (ties: lower rank). Every item has exactly one
/// owner. Throws nanochat::Error for bad speeds (as proportional_rows) or a negative cost.
std::vector<int> deal_whole_items(const std::vector<double>& costs, const std::vector<double>& speeds);

/// Predicted optimizer seconds of a plan under `speeds` (cost units per second): the slowest
/// rank's (its AdamW elements + its Muon costs) / its speed. adam_elems[r] and muon_cost[r] are
/// per rank.
double predicted_optimizer_time(const std::vector<double>& adam_elems, const std::vector<double>& muon_cost,
                                const std::vector<double>& speeds);

/// Cost of one Muon matrix (m, n) in the units of AdamW elements: ns_steps * m * n * min(m, n).
double muon_matrix_cost(int64_t m, int64_t n, int ns_steps);

}  // namespace nanochat
