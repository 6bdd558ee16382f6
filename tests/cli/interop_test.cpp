// `nanochat export --to nanochat` / `nanochat import --from nanochat` through the binary: a trained
// checkpoint goes out and back in bit for bit with the same tokenizer ids, and training resumes
// from the import; a checkpoint real PyTorch wrote (bf16 and fp32 tensors, bare Infinity in the
// meta) imports and samples; bad input stops with a message naming the file and the key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "nanochat/core/safetensors.h"
#include "nanochat/core/torch_file.h"
#include "support/cli_util.h"

using namespace nctest;

namespace {

const std::string kSample =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune.";

std::string fixture_folder() { return std::string(NANOCHAT_TEST_DATA) + "/interop/nanochat"; }

Result run_in(const std::string& base, const std::string& args) {
  auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + base + " timeout 300 " + NANOCHAT_BINARY + args);
  return {code, out};
}

void expect_same_tensors(const std::string& a, const std::string& b) {
  const StFile fa = load_safetensors(a), fb = load_safetensors(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.has(name)) << name;
    EXPECT_EQ(t.shape, fb.at(name).shape) << name;
    EXPECT_TRUE(t.bytes == fb.at(name).bytes) << name << " differs";
  }
}

}  // namespace

TEST(Interop, ExportThenImportGivesTheSameWeightsAndTokenizerAndResumes) {
  BaseDir src("nc_interop_src");
  auto r = run(src, std::string(kTiny) + " --num-iterations 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string out = src.dir + "/exported";
  r = run(src, " export --to nanochat -g t --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* f : {"/base_checkpoints/t/model_000002.pt", "/base_checkpoints/t/meta_000002.json",
                        "/tokenizer/tokenizer.pkl", "/tokenizer/token_bytes.pt"})
    EXPECT_TRUE(fs::exists(out + f)) << f;
  // nanochat's fields, parsed by nanochat.cpp's own JSON reader
  const json meta = json::parse(slurp(out + "/base_checkpoints/t/meta_000002.json"));
  EXPECT_EQ(meta["step"], 2);
  EXPECT_EQ(meta["model_config"]["n_layer"], 2);
  EXPECT_TRUE(meta.contains("loop_state") && meta.contains("user_config") && meta.contains("dataloader_state_dict"));

  BaseDir dst("nc_interop_dst");  // the same shards; its tokenizer is removed and comes from the import
  fs::remove_all(dst.dir + "/tokenizer");
  r = run(dst, " import --from nanochat " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("optimizer state starts fresh"), std::string::npos) << r.out;  // exported without it
  expect_same_tensors(src.ckpt() + "/model_000002.safetensors", dst.ckpt() + "/model_000002.safetensors");
  const Tokenizer a = Tokenizer::load(src.dir + "/tokenizer"), b = Tokenizer::load(dst.dir + "/tokenizer");
  EXPECT_EQ(a.encode(kSample), b.encode(kSample));
  EXPECT_EQ(a.hash(), b.hash());

  r = run(dst, std::string(kTiny) + " --num-iterations 3 --resume-from-step 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resumed from step 2"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dst.ckpt() + "/model_000003.safetensors"));

  r = run(dst, " import --from nanochat " + out);  // never overwrites a checkpoint
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("already holds step 2"), std::string::npos) << r.out;
}

TEST(Interop, ImportsACheckpointRealTorchWroteAndSamplesFromIt) {
  EmptyDir d("nc_interop_torch");
  auto r = run_in(d.dir, " import --from nanochat " + fixture_folder());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string ck = d.dir + "/base_checkpoints/d1";
  // bf16 tensors widened exactly, fp32 ones unchanged
  const TorchStateDict sd = load_torch_state_dict(fixture_folder() + "/base_checkpoints/d1/model_000003.pt");
  const StFile ours = load_safetensors(ck + "/model_000003.safetensors");
  ASSERT_EQ(sd.size(), ours.tensors.size());
  for (const auto& [name, t] : sd) {
    const std::vector<float> want = tensor_to_f32(t, name);
    ASSERT_EQ(ours.at(name).bytes.size(), want.size() * 4) << name;
    EXPECT_EQ(std::memcmp(ours.at(name).bytes.data(), want.data(), want.size() * 4), 0) << name;
  }
  const json meta = json::parse(slurp(ck + "/meta_000003.json"));
  EXPECT_EQ(meta["loop_state"]["min_val_bpb"], "Infinity");  // Python's bare Infinity
  EXPECT_EQ(meta["loop_state"]["smooth_train_loss"], 5.25);
  // the tokenizer gives tiktoken's ids
  const json want_ids = json::parse(slurp(std::string(NANOCHAT_TEST_DATA) + "/interop/tokenizer.json"));
  EXPECT_EQ(Tokenizer::load(d.dir + "/tokenizer").encode(want_ids["text"].get<std::string>()),
            want_ids["ids"].get<std::vector<int32_t>>());
  r = run_in(d.dir, " sample -g d1 -p \"The capital of France\" -n 6 -t 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("The capital of France"), std::string::npos) << r.out;
}

TEST(Interop, BadInputNamesTheFileAndKey) {
  EmptyDir d("nc_interop_bad");
  const std::string src = d.dir + "/src";
  fs::copy(fixture_folder(), src, fs::copy_options::recursive);
  const std::string meta_path = src + "/base_checkpoints/d1/meta_000003.json";
  const std::string model_path = src + "/base_checkpoints/d1/model_000003.pt";
  const std::string meta = slurp(meta_path);

  // a meta that describes two layers: the per-layer scalars have one entry, not two
  std::string two = meta;
  const size_t at = two.find("\"n_layer\": 1");
  ASSERT_NE(at, std::string::npos);
  two.replace(at, 12, "\"n_layer\": 2");
  std::ofstream(meta_path, std::ios::trunc) << two;
  auto r = run_in(d.dir + "/b1", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(model_path), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("key resid_lambdas has shape (1)"), std::string::npos) << r.out;
  std::ofstream(meta_path, std::ios::trunc) << meta;

  // a tensor the model does not have
  {
    TorchStateDict sd = load_torch_state_dict(model_path);
    std::vector<StWriteEntry> entries;
    for (const auto& [name, t] : sd) entries.push_back({name, t.dtype, t.shape, t.bytes.data()});
    const float extra[2] = {1.f, 2.f};
    entries.push_back({"transformer.h.0.attn.bias", "F32", {2}, extra});
    save_torch_state_dict(model_path, entries);
  }
  r = run_in(d.dir + "/b0", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(model_path + ": key transformer.h.0.attn.bias is not a parameter"), std::string::npos) << r.out;
  fs::copy_file(fixture_folder() + "/base_checkpoints/d1/model_000003.pt", model_path,
                fs::copy_options::overwrite_existing);

  // one flipped byte in the weights: the record's CRC32 names the file
  std::string bytes = slurp(model_path);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x55);
  std::ofstream(model_path, std::ios::binary | std::ios::trunc) << bytes;
  r = run_in(d.dir + "/b2", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(model_path), std::string::npos) << r.out;
  fs::copy_file(fixture_folder() + "/base_checkpoints/d1/model_000003.pt", model_path,
                fs::copy_options::overwrite_existing);

  // a different tokenizer already in the destination is never replaced
  BaseDir other("nc_interop_othertok");
  r = run(other, " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("different tokenizer"), std::string::npos) << r.out;

  // no tokenizer.pkl
  fs::remove(src + "/tokenizer/tokenizer.pkl");
  r = run_in(d.dir + "/b3", " import --from nanochat " + src);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(src + "/tokenizer/tokenizer.pkl"), std::string::npos) << r.out;
}
