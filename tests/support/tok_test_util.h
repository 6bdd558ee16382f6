#pragma once
// Helpers shared by the tokenizer tests: fixture paths and readers.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat::tok_test {

inline std::string fixture(const std::string& name) { return std::string(NANOCHAT_TEST_DATA) + "/tokenizer/" + name; }

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read fixture " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_jsonl_texts(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read fixture " + path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  return out;
}

}  // namespace nanochat::tok_test
