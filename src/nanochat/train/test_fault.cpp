#include "nanochat/train/test_fault.h"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

TestFault test_fault_from_env() {
  const char* env = std::getenv("NANOCHAT_TEST_FAULT");
  if (env == nullptr || *env == 0) return {};
  std::vector<std::string> part;
  std::stringstream ss(env);
  for (std::string p; std::getline(ss, p, ':');) part.push_back(p);
  try {
    if (part.size() == 4 && part[0] == "flip-bit") return {part[0], std::stoi(part[1]), std::stoll(part[2]), part[3]};
    if (part.size() == 2 && part[0] == "write-fail") return {part[0], std::stoi(part[1]), -1, ""};
    if (part.size() == 2 && part[0] == "save-stall") return {part[0], 0, std::stoll(part[1]), ""};
    if (part.size() == 3 && part[0] == "start-delay") return {};  // the start-up barrier's (dist/startup.cpp)
    if (part.size() == 3 && part[0] == "slow") return {part[0], std::stoi(part[1]), -1, "", std::stod(part[2])};
  } catch (const std::exception&) {
  }
  fail("NANOCHAT_TEST_FAULT='", env,
       "' is not flip-bit:<rank>:<step>:<tensor>, write-fail:<rank>, save-stall:<step>, start-delay:<rank>:<s> or ",
       "slow:<rank>:<factor> (it is for tests only)");
}

void flip_lowest_bit(GPT& model, const std::string& tensor) {
  for (const auto& p : model.params())
    if (p.name == tensor) {
      uint32_t bits;
      std::memcpy(&bits, model.param_data() + p.offset, sizeof bits);
      bits ^= 1u;
      std::memcpy(model.param_data() + p.offset, &bits, sizeof bits);
      return;
    }
  fail("NANOCHAT_TEST_FAULT: the model has no tensor ", tensor);
}

}  // namespace nanochat
