#pragma once
// The message of the nanochat::Error a call throws, for tests that check what an error says.
#include <functional>
#include <string>

#include "nanochat/core/error.h"

namespace nctest {

/// Runs fn and returns the what() of the nanochat::Error it threw, or "" when it threw none
/// (any other exception propagates).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const nanochat::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nctest
