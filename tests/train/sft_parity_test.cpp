// chat-sft against nanochat's own code (tools/chat/make_sft_fixture.py runs nanochat's
// scripts/chat_sft.py generator, gpt.py and optim.py; fixtures in tests/fixtures/sft/):
//  * the packed rows of one epoch, call by call: inputs, targets with the mask, the end of the
//    epoch and the progress the LR follows (train/sft_data.h);
//  * one SFT step from a pretrained optimizer state saved by nanochat: the loss and every parameter
//    after the update (chat_sft's set-up: fresh lrs x init_lr_frac, the loaded moments and weight
//    decay), to the tolerance of the base-train parity (1e-4 of each tensor's largest value), the
//    elements where nanochat's own float32 and float64 runs differ by 1e-5 of it left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/checkpoint/interop_optim.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/tasks/jsonl_task.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "nanochat/train/sft_data.h"
#include "nanochat/train/trainer.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

const std::string kDir = std::string(NANOCHAT_TEST_DATA) + "/sft";

// The fixture's tokenizer: the small test tokenizer's first 300 tokens (as the generator built it).
Tokenizer fixture_tokenizer() {
  const Tokenizer small = Tokenizer::load(std::string(NANOCHAT_TEST_DATA) + "/tokenizer/small_tok");
  std::vector<std::string> tokens;
  for (int32_t id = 0; id < 300; ++id) tokens.push_back(small.id_to_token_bytes(id));
  return Tokenizer::from_tokens(tokens);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// max |got - want| <= 1e-4 * max |want| over the elements not in `skip`.
void expect_close(const std::string& what, const float* got, const std::vector<float>& want,
                  const std::vector<int64_t>& skip = {}) {
  double scale = 0, err = 0;
  size_t worst = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), static_cast<int64_t>(i)) != skip.end()) continue;
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > err || std::isnan(e)) {
      err = std::isnan(e) ? INFINITY : e;
      worst = i;
    }
  }
  EXPECT_LE(err, 1e-4 * scale) << what << ": max abs error " << err << " at " << worst << " (got " << got[worst]
                               << ", want " << want[worst] << ")";
}

}  // namespace

TEST(SftParity, PackedRowsOfAnEpochAreNanochats) {
  const json fx = read_json(kDir + "/packing.json");
  const int T = fx.at("T"), B = fx.at("B");
  const Tokenizer tok = fixture_tokenizer();
  auto train = std::make_shared<tasks::JsonlTask>(kDir + "/train.jsonl");
  ASSERT_EQ(train->size(), fx.at("dataset_size").get<int64_t>());
  auto stream = make_sft_stream(tok, train, nullptr, SftStreamConfig{T, B, -1}, nullptr);
  const json& calls = fx.at("calls");
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    const StepRows s = stream->next_step(static_cast<int64_t>(k));
    ASSERT_EQ(s.rows.size(), static_cast<size_t>(B) * (T + 1));
    split_rows(s.rows.data(), B, T, x.data(), y.data());
    const json& c = calls[k];
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(x[b * T + t], c.at("inputs")[b][t].get<int32_t>()) << "call " << k << " row " << b << " pos " << t;
        ASSERT_EQ(y[b * T + t], c.at("targets")[b][t].get<int32_t>()) << "call " << k << " row " << b << " pos " << t;
      }
    // step k ends the run when nanochat's call k+1 set last_step; its LR progress is the next call's
    EXPECT_EQ(s.end, c.at("last_step").get<bool>()) << "step " << k;
    if (s.end) {
      EXPECT_EQ(k + 1, calls.size());
      break;
    }
    EXPECT_DOUBLE_EQ(s.progress, calls[k + 1].at("approx_progress").get<double>()) << "step " << k;
  }
}

TEST(SftParity, OneStepFromNanochatsOptimizerStateIsNanochats) {
  const StFile f = load_safetensors(kDir + "/step.safetensors");
  const ModelConfig cfg = ModelConfig::from_json(json::parse(f.metadata.at("config")));
  GPT model(cfg);
  for (const ParamInfo& p : model.params()) {
    const std::vector<float> v = f.at("param." + p.name).to_f32();
    ASSERT_EQ(v.size(), static_cast<size_t>(p.numel)) << p.name;
    std::copy(v.begin(), v.end(), model.param_data() + p.offset);
  }
  const json lrs = json::parse(f.metadata.at("lrs"));
  OptimConfig oc;
  oc.unembedding_lr = lrs.at("unembedding_lr").get<float>();
  oc.embedding_lr = lrs.at("embedding_lr").get<float>();
  oc.matrix_lr = lrs.at("matrix_lr").get<float>();
  oc.scalar_lr = 0.5f;
  oc.weight_decay = 0.f;
  oc.model_dim = cfg.n_embd;
  MuonAdamW opt(optimizer_params(model), oc);
  opt.load_whole_state(load_nanochat_optimizer({kDir + "/optim_000002_rank0.pt"}, opt));
  opt.scale_initial_lrs(std::stod(f.metadata.at("init_lr_frac")));

  std::vector<int32_t> idx, targets;
  for (int64_t v : f.at("idx").to_i64()) idx.push_back(static_cast<int32_t>(v));
  for (int64_t v : f.at("targets").to_i64()) targets.push_back(static_cast<int32_t>(v));
  const int B = static_cast<int>(f.at("idx").shape[0]), T = static_cast<int>(f.at("idx").shape[1]);
  const int64_t valid = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
  ASSERT_GT(valid, 0);
  ASSERT_LT(valid, static_cast<int64_t>(targets.size())) << "the batch should hold masked targets";
  // the engine's step: the gradient of the token-loss sum, scaled by 1 / valid targets (train/zero2_grad_accum.h)
  const float loss = model.forward_backward(idx.data(), targets.data(), B, T, static_cast<float>(valid));
  const double want_loss = std::stod(f.metadata.at("loss"));
  EXPECT_NEAR(loss, want_loss, 1e-4 * std::fabs(want_loss));
  opt.step(std::stof(f.metadata.at("lrm")), std::stof(f.metadata.at("momentum")),
           std::stof(f.metadata.at("muon_weight_decay")), 1.f / static_cast<float>(valid));
  // elements where nanochat's own float32 step is 1e-5 of the scale away from its float64 step are
  // rounding noise (make_sft_fixture.py); they are left out, and there must be few
  int64_t skipped = 0;
  for (const ParamInfo& p : model.params()) {
    std::vector<int64_t> skip;
    if (f.has("ambiguous." + p.name)) skip = f.at("ambiguous." + p.name).to_i64();
    skipped += static_cast<int64_t>(skip.size());
    expect_close("after the SFT step: " + p.name, model.param_data() + p.offset, f.at("sft1." + p.name).to_f32(), skip);
  }
  EXPECT_LE(skipped, 2) << "too many elements are rounding noise for the comparison to mean much";
}
