#pragma once
// The facts of the machine a rank runs on, as the report card shows them (road/card.h): host,
// CPU model, cores, ISA, memory. A training run gathers its ranks' (train/run_summary.h), so the
// card of a job names every node.
#include <nlohmann/json.hpp>
#include <string>

namespace nanochat {

struct MachineInfo {
  std::string host;
  std::string cpu;  ///< /proc/cpuinfo "model name"
  int cores = 0;    ///< physical cores this process may use (0 = unknown)
  int logical = 0;  ///< hardware threads
  std::string isa;  ///< the widest FMA path: avx512, avx2 or scalar
  double memory_gib = 0;

  nlohmann::json to_json() const;
  /// Missing fields read as empty or 0.
  static MachineInfo from_json(const nlohmann::json& j);
};

/// This machine.
MachineInfo this_machine();

}  // namespace nanochat
