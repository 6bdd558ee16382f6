#pragma once
// Wall-clock timing in seconds (steady clock).
#include <chrono>

namespace nanochat {

/// Seconds since an arbitrary fixed point (monotonic).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Measures elapsed wall time in seconds since construction or the last reset().
class Timer {
 public:
  Timer() : t0_(now_seconds()) {}
  void reset() { t0_ = now_seconds(); }
  double seconds() const { return now_seconds() - t0_; }

 private:
  double t0_;
};

}  // namespace nanochat
