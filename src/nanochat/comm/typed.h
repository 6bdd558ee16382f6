#pragma once
// Typed helpers over the Communicator's byte operations (comm/communicator.h): one value per rank
// gathered to every rank or to one root, strings of any length gathered to a root, one buffer per
// rank scattered from a root. They replace all-reduces of zero-filled slots (every rank sends
// W values to learn W values) with gathers that carry only each rank's own part.
// All ranks must call them together (they are collectives of `comm`); errors of the underlying
// operations propagate (nanochat::Error naming the peer at fault).
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "nanochat/comm/communicator.h"

namespace nanochat {

/// Every rank passes `mine`; every rank gets all ranks' values in rank order (index = rank).
/// T must be trivially copyable (its bytes travel as they are, so every rank must share the
/// architecture, as the engine's ranks do). One all_gather_bytes of sizeof(T) bytes per rank.
template <typename T>
std::vector<T> all_gather_value(Communicator& comm, const T& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_value sends the bytes of T");
  const size_t W = static_cast<size_t>(comm.world_size());
  std::vector<T> all(W);
  all[static_cast<size_t>(comm.rank())] = mine;
  comm.all_gather_bytes(&all[static_cast<size_t>(comm.rank())], all.data(), std::vector<size_t>(W, sizeof(T)))->wait();
  return all;
}

/// Every rank passes `mine`; rank `root` gets all ranks' values in rank order, the other ranks an
/// empty vector. One gather of sizeof(T) bytes per rank.
template <typename T>
std::vector<T> gather_value(Communicator& comm, const T& mine, int root) {
  static_assert(std::is_trivially_copyable_v<T>, "gather_value sends the bytes of T");
  const size_t W = static_cast<size_t>(comm.world_size());
  std::vector<T> all(comm.rank() == root ? W : 0);
  comm.gather(&mine, all.empty() ? nullptr : all.data(), std::vector<size_t>(W, sizeof(T)), root)->wait();
  return all;
}

/// Every rank passes `mine` (any length); every rank gets all ranks' strings in rank order.
/// Collectives: all_gather_value of the lengths, then one all_gather_bytes.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

/// Every rank passes `mine` (any length); rank `root` gets all ranks' strings in rank order, the
/// other ranks an empty vector. Collectives: all_gather_value of the lengths (every rank passes
/// the same sizes to the gather), then one gather.
std::vector<std::string> gather_strings(Communicator& comm, const std::string& mine, int root);

}  // namespace nanochat
