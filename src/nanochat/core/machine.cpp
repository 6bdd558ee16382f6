#include "nanochat/core/machine.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "nanochat/core/peak.h"

namespace nanochat {

namespace {

// The value of the first line of `path` that starts with `key` ("key : value"), or "".
std::string first_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
      return v;
    }
  return "";
}

}  // namespace

nlohmann::json MachineInfo::to_json() const {
  return {{"host", host},       {"cpu", cpu}, {"cores", cores},
          {"logical", logical}, {"isa", isa}, {"memory_gib", memory_gib}};
}

MachineInfo MachineInfo::from_json(const nlohmann::json& j) {
  MachineInfo m;
  if (!j.is_object()) return m;
  m.host = j.value("host", std::string());
  m.cpu = j.value("cpu", std::string());
  m.cores = j.value("cores", 0);
  m.logical = j.value("logical", 0);
  m.isa = j.value("isa", std::string());
  m.memory_gib = j.value("memory_gib", 0.0);
  return m;
}

MachineInfo this_machine() {
  MachineInfo n;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) n.host = host;
  n.cpu = first_field("/proc/cpuinfo", "model name");
  n.cores = physical_cores_available();
  n.logical = static_cast<int>(std::thread::hardware_concurrency());
  n.isa = fma_peak_isa();
  const std::string mem = first_field("/proc/meminfo", "MemTotal");  // "24576000 kB"
  if (!mem.empty()) n.memory_gib = std::strtod(mem.c_str(), nullptr) / (1024.0 * 1024.0);
  return n;
}

}  // namespace nanochat
