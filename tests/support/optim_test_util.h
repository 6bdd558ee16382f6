#pragma once
// Helpers shared by the optimizer tests: owned parameter/gradient storage and error measures.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/core/rng.h"
#include "nanochat/optim/muon_adamw.h"

namespace nanochat::testing {

/// Parameters and gradients held in std::vectors, in a fixed order, handed out as OptParams.
struct ParamSet {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> p, g;

  void add(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    names.push_back(name);
    shapes.push_back(std::move(shape));
    p.emplace_back(static_cast<size_t>(n), 0.f);
    g.emplace_back(static_cast<size_t>(n), 0.f);
  }
  /// Copies values into gradient i in place (the optimizer holds pointers into the storage).
  void set_grad(size_t i, const std::vector<float>& v) {
    if (v.size() != g[i].size()) throw std::runtime_error("set_grad: size mismatch for " + names[i]);
    std::copy(v.begin(), v.end(), g[i].begin());
  }
  void set_param(size_t i, const std::vector<float>& v) {
    if (v.size() != p[i].size()) throw std::runtime_error("set_param: size mismatch for " + names[i]);
    std::copy(v.begin(), v.end(), p[i].begin());
  }
  size_t index(const std::string& name) const {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  }
  std::vector<OptParam> views() {
    std::vector<OptParam> out;
    for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], shapes[i], p[i].data(), g[i].data()});
    return out;
  }
  void fill_params(Rng& rng, double lo, double hi) {
    for (auto& v : p)
      for (auto& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  }
};

/// max |a - b| / max |b| (b = truth); 0/0 counts as 0.
inline double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace nanochat::testing
