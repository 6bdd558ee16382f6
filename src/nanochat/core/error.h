#pragma once
// Errors: every failure a user can cause is reported as nanochat::Error with a message that
// names the file / flag / rank / host and says what to do. Internal invariants use NC_CHECK,
// which also throws (never aborts) so the CLI can print the message and exit non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace nanochat {

/// The one exception type of the product. what() is a complete, user-facing sentence.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void format_into(std::ostringstream&) {}
template <typename T, typename... Rest>
void format_into(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  format_into(os, rest...);
}
}  // namespace detail

/// Concatenates its arguments with operator<< into a string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::format_into(os, args...);
  return os.str();
}

/// Throws nanochat::Error built from the concatenated arguments.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

}  // namespace nanochat

/// Checks a condition; on failure throws nanochat::Error with the message and source location.
#define NC_CHECK(cond, ...)                                                                                    \
  do {                                                                                                         \
    if (!(cond))                                                                                               \
      ::nanochat::fail("internal check failed (", #cond, ") at ", __FILE__, ":", __LINE__, ": ", __VA_ARGS__); \
  } while (0)
