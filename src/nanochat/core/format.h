#pragma once
// Small text formatting helpers for logs.
#include <cstdint>
#include <cstdio>
#include <string>

namespace nanochat {

/// Writes `line` and a newline to stdout and flushes, when `on` (a job prints its log lines on
/// rank 0 only: print_line_if(rank == 0, ...)).
inline void print_line_if(bool on, const std::string& line) {
  if (!on) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

/// Integer with thousands separators, like Python's f"{v:,}" (e.g. 1234567 -> "1,234,567").
inline std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -(v + 1) + 1ULL : static_cast<uint64_t>(v));
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

/// `v` with `decimals` digits after the point, like Python's f"{v:.{decimals}f}".
inline std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

/// A step number as checkpoint file names spell it: six digits, zero-padded (nanochat's f"{step:06d}").
inline std::string step6(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "%06lld", static_cast<long long>(step));
  return b;
}

/// If `name` is `prefix` followed by one or more decimal digits (nothing else), returns that
/// number; otherwise -1. E.g. parse_suffix_number("complete_000042", "complete_") == 42.
inline int64_t parse_suffix_number(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name.size() - prefix.size() > 18) return -1;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

}  // namespace nanochat
