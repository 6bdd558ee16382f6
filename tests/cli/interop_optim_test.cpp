// The optimizer state through `nanochat export --to nanochat --with-optimizer` and
// `nanochat import --from nanochat`: a 2-rank run's state goes out as nanochat's one-rank
// optim_<S>_rank0.pt (an ordinary pickle Python's stdlib reads) and comes back bit for bit;
// the optimizer state nanochat's own MuonAdamW wrote under real PyTorch (one rank, and the same
// state as 2 ranks hold it) imports to the same moments and training resumes from it; an
// optimizer file that does not fit stops with a message naming the file and the key, and corrupted
// copies of the real file only ever end in success or nanochat::Error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nanochat/checkpoint/interop_optim.h"
#include "nanochat/core/error.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/core/torch_file.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "support/cli_util.h"

using namespace nctest;

namespace {

std::string fixtures() { return std::string(NANOCHAT_TEST_DATA) + "/interop"; }

Result run_in(const std::string& base, const std::string& args) {
  auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + base + " timeout 300 " + NANOCHAT_BINARY + args);
  return {code, out};
}

// A model of a checkpoint's config with its optimizer (for the whole state of its shards).
struct Opt {
  GPT model;
  MuonAdamW opt;
  static std::vector<OptParam> views(GPT& m) {
    std::vector<OptParam> ops;
    for (const auto& p : m.params())
      ops.push_back({p.name, p.shape, m.param_data() + p.offset, m.grad_data() + p.offset});
    return ops;
  }
  static ModelConfig config(const std::string& meta_path) {
    std::string text = slurp(meta_path);  // nanochat's meta may hold Python's bare Infinity
    for (size_t at; (at = text.find("Infinity")) != std::string::npos;) text.replace(at, 8, "null");
    return ModelConfig::from_json(json::parse(text).at("model_config"));
  }
  explicit Opt(const std::string& meta_path) : model(config(meta_path)), opt(views(model), OptimConfig{}) {}
};

// The whole optimizer state of step S in checkpoint folder `dir`, saved by `world` ranks.
MuonAdamW::WholeState whole_state(const std::string& dir, int step, int world) {
  char s[16];
  std::snprintf(s, sizeof s, "%06d", step);
  Opt o(dir + "/meta_" + s + ".json");
  std::vector<StFile> shards;
  for (int r = 0; r < world; ++r)
    shards.push_back(load_safetensors(dir + "/optim_" + s + "_rank" + std::to_string(r) + ".safetensors"));
  return o.opt.assemble_whole_state(shards);
}

void expect_same_state(const MuonAdamW::WholeState& a, const MuonAdamW::WholeState& b) {
  ASSERT_EQ(a.values.size(), b.values.size());
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0) << "moments differ";
}

}  // namespace

TEST(InteropOptim, TwoRankStateExportsAndImportsBitExactAndResumes) {
  BaseDir src("nc_iopt_src");
  const std::string launch =
      " run --nproc-per-node 2 --threads-per-rank 1 --master-port " + std::to_string(free_port());
  auto r = run(src, launch + kTiny + " --num-iterations 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string out = src.dir + "/exported";
  r = run(src, " export --to nanochat -g t --with-optimizer --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string pt = out + "/base_checkpoints/t/optim_000002_rank0.pt";
  ASSERT_TRUE(fs::exists(pt)) << r.out;

  // an ordinary pickle: Python's stdlib reads nanochat's state_dict layout from it
  const auto [pc, py] = nctest::shell("python3 " + std::string(NANOCHAT_SOURCE_DIR) +
                                      "/tools/interop/read_with_stdlib.py optimizer " + pt + " 2>&1");
  ASSERT_EQ(pc, 0) << py;
  const json sd = json::parse(py);
  ASSERT_EQ(sd["param_groups"].size(), 10u);  // 6 AdamW groups, 4 Muon shapes of a 2-layer model
  EXPECT_EQ(sd["param_groups"][0]["kind"], "adamw");
  EXPECT_EQ(sd["param_groups"][0]["params"], json::array({0}));
  EXPECT_EQ(sd["param_groups"][0]["betas"], json::array({0.8, 0.96}));
  EXPECT_EQ(sd["param_groups"][9]["kind"], "muon");
  EXPECT_EQ(sd["param_groups"][9]["ns_steps"], 5);
  EXPECT_EQ(sd["state"]["0"]["step"], 2);
  // The groups carry what nanochat's base_train set before its last step (it = S-1 = 1 of N = 2),
  // from the schedule's closed form: lrm = (it+1)/warmup = 2/40; Muon momentum
  // 0.85 + (0.97-0.85) * it/400; Muon weight decay wd_scaled * 0.5 * (1 + cos(pi * it/N)) with
  // wd_scaled = 0.28 * sqrt(B/2^19) * D_ref/D, D = int(12 * scaling params), D_ref = 12 * the d12
  // model's (the same aspect ratio, head dim, T and vocabulary).
  {
    const ModelConfig cfg = Opt::config(out + "/base_checkpoints/t/meta_000002.json");
    const ModelConfig d12 = ModelConfig::from_depth(12, 32, 32, 64, static_cast<int>(cfg.vocab_size), "SL");
    auto scaling = [](const ModelConfig& c) {
      const ScalingParams p = GPT::scaling_params(c);
      return static_cast<double>(p.transformer_matrices + p.lm_head);
    };
    const double batch_scale = std::sqrt(256.0 / 524288.0);
    const double D = std::floor(12.0 * scaling(cfg)), D_ref = 12.0 * scaling(d12);
    const double wd_scaled = 0.28 * batch_scale * (D_ref / D);
    const double lrm = 2.0 / 40.0;
    const json& lm_head = sd["param_groups"][0];
    const json& muon = sd["param_groups"][9];
    auto near = [](double got, double want) { return std::abs(got - want) <= 1e-6 * std::abs(want); };
    EXPECT_TRUE(near(lm_head["lr"], 0.008 * batch_scale * std::pow(64.0 / 768.0, -0.5) * lrm)) << lm_head.dump();
    EXPECT_TRUE(near(lm_head["initial_lr"], 0.008 * batch_scale * std::pow(64.0 / 768.0, -0.5))) << lm_head.dump();
    EXPECT_TRUE(near(lm_head["weight_decay"], 0.01)) << lm_head.dump();  // AdamW decays are fixed
    EXPECT_TRUE(near(muon["lr"], 0.02 * batch_scale * lrm)) << muon.dump();
    EXPECT_TRUE(near(muon["momentum"], 0.85 + 0.12 * 1.0 / 400.0)) << muon.dump();
    EXPECT_TRUE(near(muon["weight_decay"], wd_scaled * 0.5 * (1.0 + std::cos(M_PI * 1.0 / 2.0)))) << muon.dump();
    EXPECT_NE(muon["weight_decay"].get<double>(), 0.28) << "not the unscaled flag value";
  }
  EXPECT_EQ(sd["state"]["0"]["exp_avg"]["shape"], json::array({512, 64}));  // lm_head, every row

  BaseDir dst("nc_iopt_dst");
  fs::remove_all(dst.dir + "/tokenizer");
  r = run(dst, " import --from nanochat " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("from nanochat's 1-rank optimizer files"), std::string::npos) << r.out;
  expect_same_state(whole_state(src.ckpt(), 2, 2), whole_state(dst.ckpt(), 2, 1));

  r = run(dst, std::string(kTiny) + " --num-iterations 3 --resume-from-step 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resumed from step 2"), std::string::npos) << r.out;
}

TEST(InteropOptim, OurGroupsNumberParametersLikeNanochat) {
  // optim_groups.json: nanochat's setup_optimizer groups of the fixture's model, by name
  const json groups = json::parse(slurp(fixtures() + "/optim_groups.json"));
  Opt o(fixtures() + "/nanochat/base_checkpoints/d1/meta_000003.json");
  ASSERT_EQ(groups.size(), o.opt.groups().size());
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g]["kind"], o.opt.groups()[g].kind == OptKind::AdamW ? "adamw" : "muon") << g;
    EXPECT_EQ(groups[g]["params"].get<std::vector<std::string>>(), nanochat_param_names(o.opt.groups()[g])) << g;
  }
}

TEST(InteropOptim, ImportsTheStateNanochatsMuonAdamWWroteOnOneOrTwoRanksAndResumes) {
  const std::string fix_pt = fixtures() + "/nanochat/base_checkpoints/d1/optim_000003_rank0.pt";
  BaseDir one("nc_iopt_one");
  fs::remove_all(one.dir + "/tokenizer");
  auto r = run(one, " import --from nanochat " + fixtures() + "/nanochat");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("from nanochat's 1-rank optimizer files"), std::string::npos) << r.out;
  const std::string ck = one.dir + "/base_checkpoints/d1";
  // the moments are torch's, value for value (lm_head is parameter 0, the (32, 32) Muon group is 9)
  const StFile ours = load_safetensors(ck + "/optim_000003_rank0.safetensors");
  const TorchObject t = load_torch_object(fix_pt);
  const int st = t.tree.dict_get(t.tree.root, "state");
  auto torch_state = [&](int64_t idx, const std::string& key) {
    for (const auto& [k, v] : t.tree.at(st).dict)
      if (t.tree.at(k).i == idx) return t.tensor(t.tree.dict_get(v, key), key);
    return StTensor{};
  };
  EXPECT_TRUE(ours.at("adamw.lm_head.weight.exp_avg_sq").bytes == torch_state(0, "exp_avg_sq").bytes);
  EXPECT_TRUE(ours.at("muon.transformer.h.0.attn.c_q.weight.momentum_buffer").bytes ==
              torch_state(9, "momentum_buffer").bytes);

  // the same state as nanochat's optimizer holds it on 2 ranks: the same whole state
  EmptyDir two("nc_iopt_two");
  fs::copy(fixtures() + "/nanochat", two.dir + "/src", fs::copy_options::recursive);
  for (int k = 0; k < 2; ++k) {
    const std::string name = "/optim_000003_rank" + std::to_string(k) + ".pt";
    fs::copy_file(fixtures() + "/optim_2ranks" + name, two.dir + "/src/base_checkpoints/d1" + name,
                  fs::copy_options::overwrite_existing);
  }
  r = run_in(two.dir + "/base", " import --from nanochat " + two.dir + "/src");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("from nanochat's 2-rank optimizer files"), std::string::npos) << r.out;
  expect_same_state(whole_state(ck, 3, 1), whole_state(two.dir + "/base/base_checkpoints/d1", 3, 1));

  r = run(one,
          " base-train --depth 1 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern L"
          " --device-batch-size 2 --total-batch-size 256 --eval-every -1 --sample-every -1"
          " --core-metric-every -1 --threads 1 --model-tag d1 --num-iterations 4 --resume-from-step 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resumed from step 3"), std::string::npos) << r.out;
  // the AdamW step counts continue from nanochat's (1 step there, 1 here)
  int64_t step = 0;
  const StFile resumed = load_safetensors(ck + "/optim_000004_rank0.safetensors");
  std::memcpy(&step, resumed.at("adamw.lm_head.weight.step").bytes.data(), sizeof step);
  EXPECT_EQ(step, 2);
}

TEST(InteropOptim, AnOptimizerFileThatDoesNotFitNamesTheFileAndKey) {
  EmptyDir d("nc_iopt_bad");
  const std::string src = d.dir + "/src", ck = src + "/base_checkpoints/d1";
  fs::copy(fixtures() + "/nanochat", src, fs::copy_options::recursive);
  // rank 0 of a 2-rank run alone: its lm_head moments hold half the rows
  fs::copy_file(fixtures() + "/optim_2ranks/optim_000003_rank0.pt", ck + "/optim_000003_rank0.pt",
                fs::copy_options::overwrite_existing);
  auto r = run_in(d.dir + "/b1", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(ck + "/optim_000003_rank0.pt: state[0]['exp_avg'] (lm_head.weight) has shape (160, 32)"),
            std::string::npos)
      << r.out;
  // rank 1 without rank 0
  fs::rename(ck + "/optim_000003_rank0.pt", ck + "/optim_000003_rank1.pt");
  r = run_in(d.dir + "/b2", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no optim_000003_rank0.pt"), std::string::npos) << r.out;
  // the optimizer of another model (the weights' state of a 2-layer run has other groups)
  fs::remove(ck + "/optim_000003_rank1.pt");
  fs::copy_file(fixtures() + "/tensors.pt", ck + "/optim_000003_rank0.pt");
  r = run_in(d.dir + "/b3", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(ck + "/optim_000003_rank0.pt"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d.dir + "/b3/base_checkpoints/d1/complete_000003")) << "nothing written";
}

TEST(InteropOptim, CorruptedOptimizerFilesEndInAnErrorNamingTheFile) {
  const std::string fix_pt = fixtures() + "/nanochat/base_checkpoints/d1/optim_000003_rank0.pt";
  const std::string good = slurp(fix_pt);
  Opt o(fixtures() + "/nanochat/base_checkpoints/d1/meta_000003.json");
  EmptyDir d("nc_iopt_fuzz");
  const std::string path = d.dir + "/optim_000003_rank0.pt";
  std::mt19937 rng(7);
  int errors = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good;
    if (i % 3 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      for (int k = 0; k < 1 + i % 4; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      (void)load_nanochat_optimizer({path}, o.opt);
    } catch (const nanochat::Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 150);
}
