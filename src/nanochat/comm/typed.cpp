#include "nanochat/comm/typed.h"

namespace nanochat {

namespace {

// Splits `joined` (the concatenation) into strings of the given lengths.
std::vector<std::string> split_joined(const std::string& joined, const std::vector<uint64_t>& sizes) {
  std::vector<std::string> out;
  out.reserve(sizes.size());
  size_t at = 0;
  for (uint64_t n : sizes) {
    out.push_back(joined.substr(at, static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  if (comm.world_size() == 1) return {mine};
  const std::vector<uint64_t> sizes = all_gather_value<uint64_t>(comm, mine.size());
  std::vector<size_t> bytes(sizes.begin(), sizes.end());
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::string joined(total, '\0');
  comm.all_gather_bytes(mine.data(), joined.data(), bytes)->wait();
  return split_joined(joined, sizes);
}

std::vector<std::string> gather_strings(Communicator& comm, const std::string& mine, int root) {
  if (comm.world_size() == 1) return {mine};
  const std::vector<uint64_t> sizes = all_gather_value<uint64_t>(comm, mine.size());
  std::vector<size_t> bytes(sizes.begin(), sizes.end());
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::string joined(comm.rank() == root ? total : 0, '\0');
  comm.gather(mine.data(), comm.rank() == root ? joined.data() : nullptr, bytes, root)->wait();
  if (comm.rank() != root) return {};
  return split_joined(joined, sizes);
}

}  // namespace nanochat
