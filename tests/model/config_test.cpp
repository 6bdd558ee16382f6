// ModelConfig and the parameter / FLOP counts against docs/nanochat.md 1.1, 1.6 and 1.9's worked
// tables (numbers computed by nanochat itself).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/model/config.h"
#include "nanochat/model/gpt.h"

using namespace nanochat;

TEST(ModelConfig, DefaultsAreNanochats) {
  ModelConfig c;
  EXPECT_EQ(c.sequence_len, 2048);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 6);
  EXPECT_EQ(c.n_kv_head, 6);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.window_pattern, "SSSL");
  EXPECT_EQ(c.head_dim(), 128);
}

TEST(ModelConfig, FromDepthRoundsWidthUpToHeadDim) {
  struct Row {
    int depth, head_dim, T;
    int64_t C, H;
  };
  // docs/nanochat.md 1.1 worked configs (aspect 64)
  for (Row r :
       {Row{6, 64, 512, 384, 6}, Row{12, 128, 2048, 768, 6}, Row{20, 128, 2048, 1280, 10}, Row{24, 128, 2048, 1536, 12},
        Row{26, 128, 2048, 1664, 13}, Row{5, 128, 512, 384, 3},  // 320 rounded up to 384
        Row{4, 128, 512, 256, 2}}) {
    const ModelConfig c = ModelConfig::from_depth(r.depth, 64, r.head_dim, r.T, 32768, "SSSL");
    EXPECT_EQ(c.n_embd, r.C) << "depth " << r.depth;
    EXPECT_EQ(c.n_head, r.H) << "depth " << r.depth;
    EXPECT_EQ(c.n_kv_head, r.H);
    EXPECT_EQ(c.n_layer, r.depth);
    EXPECT_EQ(c.head_dim(), r.head_dim);
    EXPECT_EQ(c.sequence_len, r.T);
  }
  EXPECT_THROW(ModelConfig::from_depth(0, 64, 128, 512, 32768, "L"), Error);
}

TEST(ModelConfig, PaddedVocab) {
  ModelConfig c;
  c.vocab_size = 32768;
  EXPECT_EQ(c.padded_vocab(), 32768);
  c.vocab_size = 100;
  EXPECT_EQ(c.padded_vocab(), 128);
  c.vocab_size = 50;
  EXPECT_EQ(c.padded_vocab(), 64);
  c.vocab_size = 65;
  EXPECT_EQ(c.padded_vocab(), 128);
}

TEST(ModelConfig, WindowSizes) {
  ModelConfig c;  // T = 2048, "SSSL", 12 layers
  const std::vector<int> w = c.window_sizes();
  const std::vector<int> want = {512, 512, 512, 2048, 512, 512, 512, 2048, 512, 512, 512, 2048};
  EXPECT_EQ(w, want);
  c.sequence_len = 512;
  c.window_pattern = "S";
  c.n_layer = 3;
  EXPECT_EQ(c.window_sizes(), (std::vector<int>{128, 128, 512}));  // last layer always long
  c.window_pattern = "sl";                                         // case-insensitive
  EXPECT_EQ(c.window_sizes(), (std::vector<int>{128, 512, 512}));
  c.window_pattern = "L";
  EXPECT_EQ(c.window_sizes(), (std::vector<int>{512, 512, 512}));
  c.sequence_len = 1000;  // ceil(ceil(1000/4)/128)*128 = 256
  c.window_pattern = "S";
  EXPECT_EQ(c.window_sizes()[0], 256);
  for (const char* bad : {"SXL", ""}) {
    c.window_pattern = bad;
    try {
      c.window_sizes();
      ADD_FAILURE() << "pattern '" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--window-pattern"), std::string::npos) << e.what();
    }
  }
}

TEST(ModelConfig, ValueEmbedLayers) {
  ModelConfig c;
  c.n_layer = 6;
  std::vector<int> ve;
  for (int i = 0; i < 6; ++i)
    if (c.has_value_embed(i)) ve.push_back(i);
  EXPECT_EQ(ve, (std::vector<int>{1, 3, 5}));
  c.n_layer = 3;
  ve.clear();
  for (int i = 0; i < 3; ++i)
    if (c.has_value_embed(i)) ve.push_back(i);
  EXPECT_EQ(ve, (std::vector<int>{0, 2}));
}

TEST(ModelConfig, JsonRoundTrip) {
  const ModelConfig c = ModelConfig::from_depth(6, 64, 64, 512, 32768, "L");
  const nlohmann::json j = c.to_json();
  for (const char* k : {"sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "window_pattern"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(ModelConfig::from_json(j), c);
  nlohmann::json old = j;
  old.erase("window_pattern");  // old nanochat checkpoints: patched to "L"
  EXPECT_EQ(ModelConfig::from_json(old).window_pattern, "L");
  nlohmann::json broken = j;
  broken.erase("n_embd");
  EXPECT_THROW(ModelConfig::from_json(broken), Error);
  nlohmann::json bad = j;
  bad["n_head"] = 5;  // 384 % 5 != 0
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
}

// docs/nanochat.md 1.9 worked counts (vocab 32768)
TEST(ModelCounts, MatchSpecTable) {
  struct Row {
    int depth, head_dim, T;
    const char* pattern;
    int64_t wte, ve, lm_head, matrices, scalars, total, matmul, flops;
  };
  const Row rows[] = {
      {6, 64, 512, "L", 12582912, 37748736, 12582912, 10617048, 38, 73531646, 23199984, 153355680},
      {12, 128, 2048, "SSSL", 25165824, 150994944, 25165824, 84935088, 50, 286261730, 110100936, 759696048},
      {20, 128, 2048, "SSSL", 41943040, 419430400, 41943040, 393217200, 66, 896533746, 435160264, 2886212784},
      {24, 128, 2048, "SSSL", 50331648, 603979776, 50331648, 679478976, 74, 1384122122, 729810648, 4775225616},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE("depth " + std::to_string(r.depth));
    const ModelConfig c = ModelConfig::from_depth(r.depth, 64, r.head_dim, r.T, 32768, r.pattern);
    const auto m = GPT::scaling_params(c);
    EXPECT_EQ(m.wte, r.wte);
    EXPECT_EQ(m.value_embeds, r.ve);
    EXPECT_EQ(m.lm_head, r.lm_head);
    EXPECT_EQ(m.transformer_matrices, r.matrices);
    EXPECT_EQ(m.scalars, r.scalars);
    EXPECT_EQ(m.total, r.total);
    EXPECT_EQ(GPT::matmul_params(c), r.matmul);
    EXPECT_EQ(GPT::flops_per_token(c), r.flops);
  }
}

TEST(ModelCounts, InstanceAgreesWithStatic) {
  const ModelConfig c = ModelConfig::from_depth(2, 64, 64, 256, 1000, "SL");
  GPT m(c);
  EXPECT_EQ(m.num_scaling_params(), GPT::scaling_params(c));
  EXPECT_EQ(m.num_flops_per_token(), GPT::flops_per_token(c));
  EXPECT_EQ(m.num_matmul_params(), GPT::matmul_params(c));
  EXPECT_EQ(static_cast<int64_t>(m.num_params()), m.num_scaling_params().total);
}
