#include "nanochat/core/test_fault.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "nanochat/core/error.h"

namespace nanochat {

TestFault parse_test_fault(const char* text) {
  if (text == nullptr || *text == 0) return {};
  std::vector<std::string> part;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ':');) part.push_back(p);
  try {
    if (part.size() == 4 && part[0] == "flip-bit") return {part[0], std::stoi(part[1]), std::stoll(part[2]), part[3]};
    if (part.size() == 2 && part[0] == "write-fail") return {part[0], std::stoi(part[1]), -1, ""};
    if (part.size() == 2 && part[0] == "save-stall") return {part[0], 0, std::stoll(part[1]), ""};
    if (part.size() == 3 && part[0] == "die") return {part[0], std::stoi(part[1]), std::stoll(part[2]), ""};
    if (part.size() == 3 && part[0] == "start-delay") return {part[0], std::stoi(part[1]), -1, "", std::stod(part[2])};
    if (part.size() == 2 && part[0] == "stop-setup") return {part[0], std::stoi(part[1]), -1, ""};
    if (part.size() == 3 && part[0] == "slow") return {part[0], std::stoi(part[1]), -1, "", std::stod(part[2])};
  } catch (const std::exception&) {
  }
  fail("NANOCHAT_TEST_FAULT='", text,
       "' is not flip-bit:<rank>:<step>:<tensor>, write-fail:<rank>, save-stall:<step>, start-delay:<rank>:<s>, "
       "die:<rank>:<step>, stop-setup:<rank> or ",
       "slow:<rank>:<factor> (it is for tests only)");
}

TestFault test_fault_from_env() { return parse_test_fault(std::getenv("NANOCHAT_TEST_FAULT")); }

}  // namespace nanochat
