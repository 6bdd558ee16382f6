#pragma once
// Small text formatting helpers for logs.
#include <cstdint>
#include <string>

namespace nanochat {

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

}  // namespace nanochat
