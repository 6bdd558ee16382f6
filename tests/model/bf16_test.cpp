// ComputeDtype::BFloat16 against PyTorch's CPU autocast(bfloat16) on the same weights
// (tests/fixtures/bf16_autocast.safetensors, tools/reference/make_bf16_fixture.py): the fixture holds
// the float64 truth and the autocast result (logits, loss, every gradient). Errors are measured as
// max|x - truth| / max|truth| per tensor. Our bf16 engine must (a) stay close to autocast's
// figures, (b) be no further from the truth than a small factor of autocast's own distance, and
// (c) really round (it lands far further from the truth than float32 does), while float32 results
// stay bit-identical. Skipped, with the reason, on CPUs without native bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/kernels/gemm_bf16.h"
#include "nanochat/model/gpt.h"

using namespace nanochat;

namespace {

#define SKIP_WITHOUT_BF16()                                                                                          \
  do {                                                                                                               \
    if (!native_bf16_available())                                                                                    \
      GTEST_SKIP() << "no native bfloat16 on this CPU/build (" << native_bf16_status()                               \
                   << "): --dtype bfloat16 is refused here, so its parity is checked only on CPUs with AVX512_BF16 " \
                      "or AMX";                                                                                      \
  } while (0)

struct Fx {
  StFile f;
  ModelConfig cfg;
  int B = 0, T = 0;
  std::vector<int32_t> idx, targets;
};

Fx load_fixture() {
  Fx fx;
  fx.f = load_safetensors(std::string(NANOCHAT_TEST_DATA) + "/bf16_autocast.safetensors");
  fx.cfg = ModelConfig::from_json(nlohmann::json::parse(fx.f.metadata.at("config")));
  const StTensor& ti = fx.f.at("idx");
  fx.B = static_cast<int>(ti.shape[0]);
  fx.T = static_cast<int>(ti.shape[1]);
  for (int64_t v : ti.to_i64()) fx.idx.push_back(static_cast<int32_t>(v));
  for (int64_t v : fx.f.at("targets").to_i64()) fx.targets.push_back(static_cast<int32_t>(v));
  return fx;
}

void load_weights(const Fx& fx, GPT& m) {
  for (const ParamInfo& p : m.params()) {
    const std::vector<float> w = fx.f.at("param." + p.name).to_f32();
    ASSERT_EQ(w.size(), p.numel) << p.name;
    std::copy(w.begin(), w.end(), m.param(p.name));
  }
}

// max|got - want| / max|want|
double rel_err(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    num = std::isnan(e) ? INFINITY : std::max(num, e);
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return num / (den > 0 ? den : 1.0);
}

}  // namespace

TEST(Bf16, LogitsAndLossMatchAutocast) {
  SKIP_WITHOUT_BF16();
  Fx fx = load_fixture();
  GPT m(fx.cfg);
  load_weights(fx, m);
  const int64_t N = static_cast<int64_t>(fx.B) * fx.T, V = fx.cfg.vocab_size;
  std::vector<float> f32(static_cast<size_t>(N * V)), bf(f32.size());
  m.forward_logits(fx.idx.data(), fx.B, fx.T, f32.data());
  m.set_compute_dtype(ComputeDtype::BFloat16);
  m.forward_logits(fx.idx.data(), fx.B, fx.T, bf.data());

  const std::vector<float> truth = fx.f.at("truth.logits").to_f32(), ac = fx.f.at("autocast.logits").to_f32();
  const double e_ac = rel_err(ac.data(), truth);  // autocast vs truth (about 1e-2)
  const double e_bf = rel_err(bf.data(), truth);
  const double e_32 = rel_err(f32.data(), truth);
  std::printf("logits vs float64 truth: autocast %.2e, ours bf16 %.2e, ours fp32 %.2e; ours bf16 vs autocast %.2e\n",
              e_ac, e_bf, e_32, rel_err(bf.data(), ac));
  EXPECT_LE(e_bf, 1.5 * e_ac) << "bf16 logits are further from the truth than autocast's";
  EXPECT_LE(rel_err(bf.data(), ac), 2.0 * e_ac) << "bf16 logits differ from autocast's by more than bf16 noise";
  EXPECT_GE(e_bf, 100 * std::max(e_32, 1e-7)) << "the bf16 logits look unrounded: the products did not run in bf16";

  // mean loss (evaluation path and training path)
  const float loss_ac = fx.f.at("autocast.loss").to_f32()[0], loss_truth = fx.f.at("truth.loss").to_f32()[0];
  const double dl_ac = std::fabs(loss_ac - loss_truth) / loss_truth;
  const float loss_eval = m.forward_loss(fx.idx.data(), fx.targets.data(), fx.B, fx.T);
  m.zero_grad();
  const float loss_train = m.forward_backward(fx.idx.data(), fx.targets.data(), fx.B, fx.T);
  std::printf("loss: truth %.6f autocast %.6f ours bf16 eval %.6f train %.6f\n", loss_truth, loss_ac, loss_eval,
              loss_train);
  EXPECT_EQ(loss_eval, loss_train);
  EXPECT_LE(std::fabs(loss_eval - loss_truth) / loss_truth, std::max(2.0 * dl_ac, 1e-3));
  EXPECT_LE(std::fabs(loss_eval - loss_ac) / loss_ac, std::max(3.0 * dl_ac, 1e-3));
}

TEST(Bf16, GradientsMatchAutocast) {
  SKIP_WITHOUT_BF16();
  Fx fx = load_fixture();
  GPT m(fx.cfg);
  load_weights(fx, m);
  m.set_compute_dtype(ComputeDtype::BFloat16);
  for (int64_t chunk : {int64_t{0}, int64_t{7}}) {  // bf16's default lm_head chunk, and ragged chunks
    SCOPED_TRACE("lm_head chunk " + std::to_string(chunk));
    if (chunk > 0) m.set_lm_head_chunk(chunk);
    m.zero_grad();
    m.forward_backward(fx.idx.data(), fx.targets.data(), fx.B, fx.T);
    double worst_ratio = 0;
    std::string worst;
    for (const ParamInfo& p : m.params()) {
      const std::vector<float> truth = fx.f.at("truth.grad." + p.name).to_f32();
      const std::vector<float> ac = fx.f.at("autocast.grad." + p.name).to_f32();
      const double e_ac = rel_err(ac.data(), truth), e_bf = rel_err(m.grad(p.name), truth);
      // no further from the truth than 2x autocast's distance (at least bf16's half ulp, 2^-9)
      EXPECT_LE(e_bf, std::max(2.0 * e_ac, 0.002)) << p.name << ": autocast " << e_ac << ", ours " << e_bf;
      if (e_bf / e_ac > worst_ratio) {
        worst_ratio = e_bf / e_ac;
        worst = p.name;
      }
    }
    std::printf("gradients: worst (ours bf16 / autocast) distance to the truth %.2f at %s\n", worst_ratio,
                worst.c_str());
  }
}

TEST(Bf16, Float32StaysBitIdenticalAndWeightsFollowUpdates) {
  SKIP_WITHOUT_BF16();
  Fx fx = load_fixture();
  GPT m(fx.cfg);
  load_weights(fx, m);
  const size_t n = static_cast<size_t>(fx.B) * fx.T * fx.cfg.vocab_size;
  std::vector<float> before(n), after(n), bf(n), fresh(n);
  m.forward_logits(fx.idx.data(), fx.B, fx.T, before.data());
  m.set_compute_dtype(ComputeDtype::BFloat16);
  m.forward_logits(fx.idx.data(), fx.B, fx.T, bf.data());
  m.set_compute_dtype(ComputeDtype::Float32);
  m.forward_logits(fx.idx.data(), fx.B, fx.T, after.data());
  EXPECT_EQ(std::memcmp(before.data(), after.data(), n * sizeof(float)), 0) << "fp32 changed after a bf16 detour";

  // an update through a held pointer (as the optimizer writes) reaches the bf16 copy after
  // params_changed(): the logits equal those of a fresh bf16 model built from the updated weights
  m.set_compute_dtype(ComputeDtype::BFloat16);
  float* c_fc = m.param("transformer.h.1.mlp.c_fc.weight");  // held, as the optimizer holds its pointers
  m.forward_logits(fx.idx.data(), fx.B, fx.T, bf.data());
  const size_t numel = m.param_info("transformer.h.1.mlp.c_fc.weight").numel;
  for (size_t i = 0; i < numel; ++i) c_fc[i] *= 1.5f;
  m.params_changed();
  m.forward_logits(fx.idx.data(), fx.B, fx.T, after.data());
  GPT m2(fx.cfg);
  std::memcpy(m2.param_data(), static_cast<const GPT&>(m).param_data(), m.num_params() * sizeof(float));
  m2.set_compute_dtype(ComputeDtype::BFloat16);
  m2.forward_logits(fx.idx.data(), fx.B, fx.T, fresh.data());
  EXPECT_EQ(std::memcmp(after.data(), fresh.data(), n * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(after.data(), bf.data(), n * sizeof(float)), 0) << "the update did not change the logits";
}

TEST(Bf16, KvCacheDecodeMatchesFullForward) {
  SKIP_WITHOUT_BF16();
  Fx fx = load_fixture();
  GPT m(fx.cfg);
  load_weights(fx, m);
  m.set_compute_dtype(ComputeDtype::BFloat16);
  const int T = 12, V = static_cast<int>(fx.cfg.vocab_size);
  std::vector<float> full(static_cast<size_t>(T) * V), step(V);
  m.forward_logits(fx.idx.data(), 1, T, full.data());
  KVCache cache(fx.cfg, 1, T);
  m.forward_cached(fx.idx.data(), 1, T - 1, cache, nullptr);
  m.forward_cached(fx.idx.data() + T - 1, 1, 1, cache, step.data());
  std::vector<float> last(full.end() - V, full.end());
  // the same bf16 roundings of the same rows, but products of other shapes (1 row vs T rows):
  // summation order may differ
  EXPECT_LE(rel_err(step.data(), last), 1e-4);
}

TEST(Bf16, LmHeadChunkFollowsTheDtypeUnlessChosen) {
  SKIP_WITHOUT_BF16();
  Fx fx = load_fixture();
  GPT m(fx.cfg);
  EXPECT_EQ(m.lm_head_chunk(), 256);
  m.set_compute_dtype(ComputeDtype::BFloat16);
  EXPECT_EQ(m.lm_head_chunk(), 512);  // oneDNN's bf16 products gain on taller chunks
  m.set_compute_dtype(ComputeDtype::Float32);
  EXPECT_EQ(m.lm_head_chunk(), 256);
  m.set_lm_head_chunk(300);
  m.set_compute_dtype(ComputeDtype::BFloat16);
  EXPECT_EQ(m.lm_head_chunk(), 300) << "a chosen chunk must survive a dtype change";
}

TEST(Bf16, DtypeNames) {
  EXPECT_EQ(parse_compute_dtype("float32", "--dtype"), ComputeDtype::Float32);
  EXPECT_EQ(parse_compute_dtype("bfloat16", "--dtype"), ComputeDtype::BFloat16);
  EXPECT_STREQ(compute_dtype_name(ComputeDtype::BFloat16), "bfloat16");
  try {
    parse_compute_dtype("bf16", "--dtype");
    ADD_FAILURE() << "bf16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype must be float32 or bfloat16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_compute_dtype("float16", "--dtype"), Error);
}

TEST(Bf16, RefusedWithoutNativeBf16) {
  GPT m(ModelConfig::from_depth(1, 64, 64, 32, 64, "L"));
  if (native_bf16_available()) {
    EXPECT_NO_THROW(m.set_compute_dtype(ComputeDtype::BFloat16));
    return;
  }
  try {
    m.set_compute_dtype(ComputeDtype::BFloat16);
    ADD_FAILURE() << "bfloat16 accepted on a CPU without native bf16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype bfloat16 needs a CPU with native bfloat16"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.compute_dtype(), ComputeDtype::Float32);
}
