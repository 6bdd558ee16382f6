#pragma once
// Comparing two checkpoints' weights tensor by tensor (the tolerance of the world-size and split tests).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "nanochat/core/safetensors.h"

namespace nctest {

/// max over tensors of max |a - b| / max |a|. The scalars whose gradient is exactly zero at init
/// (resid/x0/backout lambdas) are included. With `verbose`, prints each tensor that sets a new worst.
inline double max_rel_diff(const nanochat::StFile& a, const nanochat::StFile& b, bool verbose = false) {
  double worst = 0;
  for (const auto& [name, t] : a.tensors) {
    auto x = t.to_f32(), y = b.at(name).to_f32();
    double mx = 0, d = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      mx = std::max(mx, std::fabs(static_cast<double>(x[i])));
      d = std::max(d, std::fabs(static_cast<double>(x[i]) - y[i]));
    }
    if (mx > 0 && d / mx > worst) {
      worst = d / mx;
      if (verbose) std::printf("  %s: max |diff| %.3g, max |p| %.3g\n", name.c_str(), d, mx);
    }
  }
  return worst;
}

}  // namespace nctest
