// Parity with the PyTorch reference (tools/reference/nanochat_ref.py, float64 truth from float32
// weights): every tests/fixtures/model_*.safetensors is loaded, its weights copied into a GPT, and
// the logits, the mean loss, the per-token losses and the gradient of every parameter compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/core/safetensors.h"
#include "nanochat/model/gpt.h"

using namespace nanochat;

namespace {

std::vector<std::string> fixture_files() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(NANOCHAT_TEST_DATA)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("model_", 0) == 0 && name.ends_with(".safetensors")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// max |got - want| <= 1e-4 * max |want|
void expect_close(const std::string& what, const float* got, const std::vector<float>& want) {
  const double tol = 1e-4 * max_abs(want);
  double err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > err || std::isnan(e)) {
      err = std::isnan(e) ? INFINITY : e;
      worst = i;
    }
  }
  EXPECT_LE(err, tol) << what << ": max abs error " << err << " at " << worst << " (got " << got[worst] << ", want "
                      << want[worst] << "), tolerance " << tol;
}

struct Fixture {
  StFile f;
  ModelConfig cfg;
  int B = 0, T = 0;
  std::vector<int32_t> idx, targets;
};

Fixture load(const std::string& path) {
  Fixture fx;
  fx.f = load_safetensors(path);
  fx.cfg = ModelConfig::from_json(nlohmann::json::parse(fx.f.metadata.at("config")));
  const StTensor& ti = fx.f.at("idx");
  EXPECT_EQ(ti.shape.size(), 2u);
  fx.B = static_cast<int>(ti.shape[0]);
  fx.T = static_cast<int>(ti.shape[1]);
  for (int64_t v : ti.to_i64()) fx.idx.push_back(static_cast<int32_t>(v));
  for (int64_t v : fx.f.at("targets").to_i64()) fx.targets.push_back(static_cast<int32_t>(v));
  return fx;
}

void load_weights(const Fixture& fx, GPT& m) {
  size_t n_param_keys = 0;
  for (const auto& [k, t] : fx.f.tensors) n_param_keys += k.rfind("param.", 0) == 0;
  EXPECT_EQ(n_param_keys, m.params().size()) << "the fixture and the model disagree on the parameter set";
  for (const ParamInfo& p : m.params()) {
    ASSERT_TRUE(fx.f.has("param." + p.name)) << "fixture lacks param." << p.name;
    const StTensor& t = fx.f.at("param." + p.name);
    ASSERT_EQ(t.shape, p.shape) << p.name;
    const std::vector<float> w = t.to_f32();
    std::copy(w.begin(), w.end(), m.param(p.name));
  }
}

}  // namespace

TEST(Parity, FixturesArePresent) {
  EXPECT_GE(fixture_files().size(), 4u) << "expected tests/fixtures/model_*.safetensors (sl_v100, "
                                           "window, gqa, ignore) from tools/reference/make_fixtures.py";
}

TEST(Parity, ParamOrderMatchesReference) {
  for (const std::string& path : fixture_files()) {
    SCOPED_TRACE(path);
    Fixture fx = load(path);
    GPT m(fx.cfg);
    const auto order = nlohmann::json::parse(fx.f.metadata.at("param_order"));
    ASSERT_EQ(order.size(), m.params().size());
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i].get<std::string>(), m.params()[i].name);
  }
}

TEST(Parity, LossGradsLogitsMatchPyTorch) {
  const auto files = fixture_files();
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    Fixture fx = load(path);
    GPT m(fx.cfg);
    load_weights(fx, m);
    const int64_t N = static_cast<int64_t>(fx.B) * fx.T;
    const int64_t V = fx.cfg.vocab_size;

    // loss + gradients (two chunkings of the fused lm_head: one chunk, and ragged chunks of 7)
    for (int64_t chunk : {int64_t{256}, int64_t{7}}) {
      SCOPED_TRACE("lm_head chunk " + std::to_string(chunk));
      m.set_lm_head_chunk(chunk);
      m.zero_grad();
      const float loss = m.forward_backward(fx.idx.data(), fx.targets.data(), fx.B, fx.T);
      const float want = fx.f.at("loss").to_f32()[0];
      EXPECT_LE(std::fabs(loss - want) / std::fabs(want), 1e-5) << "loss " << loss << " vs " << want;
      for (const ParamInfo& p : m.params()) {
        const std::string key = "grad." + p.name;
        if (!fx.f.has(key)) {
          ADD_FAILURE() << "fixture has no " << key;
          continue;
        }
        const std::vector<float> g = fx.f.at(key).to_f32();
        ASSERT_EQ(g.size(), p.numel) << key;
        expect_close(key, m.grad(p.name), g);
      }
    }

    // logits
    std::vector<float> logits(static_cast<size_t>(N * V));
    m.forward_logits(fx.idx.data(), fx.B, fx.T, logits.data());
    expect_close("logits", logits.data(), fx.f.at("logits").to_f32());

    // per-token losses (evaluation path)
    std::vector<float> ptl(static_cast<size_t>(N), -1.f);
    const float eval_loss = m.forward_loss(fx.idx.data(), fx.targets.data(), fx.B, fx.T, ptl.data());
    expect_close("per_token_loss", ptl.data(), fx.f.at("per_token_loss").to_f32());
    const float want = fx.f.at("loss").to_f32()[0];
    EXPECT_LE(std::fabs(eval_loss - want) / std::fabs(want), 1e-5);
    for (int64_t n = 0; n < N; ++n)
      if (fx.targets[n] < 0) {
        EXPECT_EQ(ptl[n], 0.f) << "ignored position " << n;
      }
  }
}

// Gradients accumulate: two half-scaled passes equal one full pass.
TEST(Parity, GradientAccumulationOnFixture) {
  const auto files = fixture_files();
  ASSERT_FALSE(files.empty());
  Fixture fx = load(files.front());
  GPT m(fx.cfg);
  load_weights(fx, m);
  m.zero_grad();
  m.forward_backward(fx.idx.data(), fx.targets.data(), fx.B, fx.T, 0.5f);
  m.forward_backward(fx.idx.data(), fx.targets.data(), fx.B, fx.T, 0.5f);
  for (const ParamInfo& p : m.params()) {
    const std::vector<float> g = fx.f.at("grad." + p.name).to_f32();
    expect_close("accumulated grad." + p.name, m.grad(p.name), g);
  }
}
