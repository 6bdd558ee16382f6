// nanochat's tokenizer.pkl (tokenizer/tiktoken_pickle.h): a pickle real tiktoken wrote gives the
// same ids as tiktoken on a sample text; ours round-trips and Python's pickle reads it; an encoding
// pickled by name and corrupted copies are refused with nanochat::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/tokenizer/tiktoken_pickle.h"
#include "nanochat/tokenizer/tokenizer.h"

using json = nlohmann::json;
using namespace nanochat;

namespace {

std::string fixture(const std::string& name) { return std::string(NANOCHAT_TEST_DATA) + "/interop/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) out += {d[c >> 4], d[c & 15]};
  return out;
}

}  // namespace

TEST(TiktokenPickle, ReadsWhatTiktokenWroteWithTheSameIds) {
  const std::string path = fixture("nanochat/tokenizer/tokenizer.pkl");
  const Tokenizer tok = tokenizer_from_tiktoken_pickle(slurp(path), path);
  const json want = json::parse(slurp(fixture("tokenizer.json")));
  EXPECT_EQ(tok.vocab_size(), want["vocab_size"].get<int>());
  EXPECT_EQ(tok.encode(want["text"].get<std::string>()), want["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.bos_id(), tok.vocab_size() - 9);
  EXPECT_EQ(tok.encode_special("<|output_end|>"), tok.vocab_size() - 1);
}

TEST(TiktokenPickle, RoundTripsAndPythonsPickleReadsIt) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs! 12345 caf\xc3\xa9";
  const Tokenizer tok = Tokenizer::train({text, text + " again", "another document about the fox"}, 300);
  const std::string pkl = tiktoken_pickle(tok);
  const Tokenizer back = tokenizer_from_tiktoken_pickle(pkl, "ours.pkl");
  EXPECT_EQ(back.hash(), tok.hash());
  EXPECT_EQ(back.encode(text), tok.encode(text));

  const std::string path = "/tmp/nc_tiktoken_" + std::to_string(::getpid()) + ".pkl";
  std::ofstream(path, std::ios::binary) << pkl;
  const std::string cmd =
      "python3 " + std::string(NANOCHAT_SOURCE_DIR) + "/tools/interop/read_with_stdlib.py tokenizer " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  std::remove(path.c_str());
  const json py = json::parse(out);
  EXPECT_EQ(py["name"], "rustbpe");
  EXPECT_EQ(py["pat_str"], kSplitPattern);
  ASSERT_EQ(py["ranks"].size(), static_cast<size_t>(tok.vocab_size() - 9));
  for (int32_t id = 0; id < tok.vocab_size() - 9; ++id) EXPECT_EQ(py["ranks"][id], hex(tok.id_to_token_bytes(id)));
  EXPECT_EQ(py["specials"]["<|bos|>"], tok.bos_id());
}

TEST(TiktokenPickle, RefusesAnEncodingPickledByName) {
  // What pickle.dump(tiktoken.get_encoding("gpt2")) writes: the state is just the name.
  const std::string pkl =
      std::string("\x80\x04") + "ctiktoken.core\nEncoding\n" + ")\x81" + "X\x04\x00\x00\x00gpt2" + "b.";
  try {
    tokenizer_from_tiktoken_pickle(pkl, "gpt2.pkl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos) << e.what();
  }
}

TEST(TiktokenPickle, SurvivesCorruptedFiles) {
  const std::string orig = slurp(fixture("nanochat/tokenizer/tokenizer.pkl"));
  std::mt19937_64 rng(99);
  int errors = 0;
  for (int it = 0; it < 2000; ++it) {
    std::string b = orig;
    const int flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng() & 0xff);
    if (rng() % 3 == 0) b.resize(rng() % b.size());
    try {
      tokenizer_from_tiktoken_pickle(b, "fuzz.pkl");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 500);
}
