#pragma once
// The training configs the step benchmarks share (bench_train_step, bench_optimizer, and through
// bench_train_step --list-configs the peer benchmark): vocab 32768 (the *v8k configs: 8192, the
// quickstart's and nanochat's CPU demo vocabulary), aspect ratio 64, so
// n_embd = ceil(depth * 64 / head_dim) * head_dim.
#include <cstdint>

#include "nanochat/model/config.h"
#include "nanochat/optim/muon_adamw.h"

namespace nanochat::bench {

struct BenchConfig {
  const char* name;
  int depth, head_dim, T, B;
  const char* pattern;
  int vocab = 32768;
};

inline constexpr int kVocab = 32768;
inline constexpr int kAspect = 64;

inline constexpr BenchConfig kConfigs[] = {
    {"d4", 4, 128, 512, 8, "SSSL"},
    {"d6", 6, 64, 512, 8, "L"},  // nanochat's runcpu config
    {"d6b32", 6, 64, 512, 32, "L"},
    {"d8", 8, 128, 512, 8, "SSSL"},
    {"d12", 12, 128, 1024, 4, "SSSL"},
    {"d4v8k", 4, 128, 512, 8, "SSSL", 8192},
    {"d8v8k", 8, 128, 512, 8, "SSSL", 8192},
    // nanochat's default context (base_train --max-seq-len 2048, SSSL: short windows of 512):
    // the same 4,096 tokens per step as the configs above
    {"d4t2k", 4, 128, 2048, 2, "SSSL"},
    {"d8t2k", 8, 128, 2048, 2, "SSSL"},
};

/// The model config of a benchmark config.
inline ModelConfig model_config(const BenchConfig& bc) {
  return ModelConfig::from_depth(bc.depth, kAspect, bc.head_dim, bc.T, bc.vocab, bc.pattern);
}

/// Elements of all the parameters the optimizer updates with AdamW.
inline double adamw_elements(const MuonAdamW& opt) {
  double total = 0;
  for (const OptGroup& g : opt.groups()) {
    if (g.kind != OptKind::AdamW) continue;
    for (int i : g.params) {
      double n = 1;
      for (int64_t d : opt.params()[static_cast<size_t>(i)].shape) n *= static_cast<double>(d);
      total += n;
    }
  }
  return total;
}

}  // namespace nanochat::bench
