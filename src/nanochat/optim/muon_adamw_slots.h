#pragma once
// MuonAdamW's per-parameter and per-group state (optim/muon_adamw.h), shared by muon_adamw.cpp (the
// update) and muon_adamw_state.cpp (layouts, checkpoints, re-sharding). Internal to optim.
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/optim/muon_adamw.h"

namespace nanochat {

namespace optim_detail {

constexpr int64_t kSmallAdamW = 1024;  // numel below which AdamW gradients are all-reduced

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shape_str(const std::vector<int64_t>& s);

}  // namespace optim_detail

// One AdamW parameter: its (possibly row-sharded) state and communication handles.
struct MuonAdamW::AdamSlot {
  int param = -1;
  bool sharded = false;             // large parameter with W > 1: reduce-scatter + all-gather
  int64_t rows = 0, row_elems = 0;  // the parameter's rows and elements per row
  int64_t row0 = 0, nrows = 0;      // owned rows [row0, row0 + nrows) (the layout's)
  size_t owned = 0;                 // owned elements
  std::vector<int64_t> state_shape;
  std::vector<size_t> counts;  // elements per rank (sharded)
  AlignedBuffer m, v, gslice;
  int64_t step = 0;
  WorkPtr reduce;
};

// One Muon group: the stacked buffers and the state of the matrices this rank owns.
struct MuonAdamW::MuonSlot {
  int group = -1;
  int64_t K = 0, m = 0, n = 0, nv = 0;
  size_t mn = 0;
  std::vector<int64_t> order;      // stack position -> matrix: each rank's matrices together, rank 0 first
  std::vector<int64_t> mine;       // the matrices this rank owns, ascending (the layout's)
  int64_t first = 0;               // stack position of this rank's first matrix
  AlignedBuffer momentum, second;  // (mine, m, n), (mine, nv)
  AlignedBuffer stack, gchunk;     // W > 1: (K, m, n) and (mine, m, n)
  std::vector<size_t> counts;      // floats per rank in the stack
  int64_t ready = 0;               // matrices marked by grad_ready() this step
  WorkPtr reduce;
};

}  // namespace nanochat
