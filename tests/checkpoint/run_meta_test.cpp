// The typed run record of a checkpoint's meta (checkpoint/run_meta.h): every field this product
// writes reads back unchanged, nanochat's own meta reads (its nulls as absent), fields it does not
// know are kept, and a field of the wrong type is named with the file.
#include "nanochat/checkpoint/run_meta.h"

#include <gtest/gtest.h>

#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"

namespace nanochat {
namespace {

ModelConfig small_model() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.vocab_size = 256;
  c.sequence_len = 64;
  c.window_pattern = "L";
  return c;
}

// The meta base-train writes (checkpoint/loop_checkpoint.h checkpoint_meta): the run's fields and
// the loop state's.
TEST(RunMeta, EveryWrittenFieldReadsBackAndTheLoopStateIsLeftToLoopState) {
  RunMeta m;
  m.model_config = small_model();
  m.user_config = {{"depth", 2}, {"run", "dummy"}};
  m.device_batch_size = 2;
  m.max_seq_len = 64;
  m.total_batch_size = 256;
  m.world_size = 3;
  m.dtype = "bfloat16";
  m.data_stream = "one-rank";
  m.tokenizer_hash = "12345678901234567890";
  m.base_checkpoint = "/b/model_000010.safetensors";
  m.muon_weight_decay = 7.5e-5;
  m.imported_from = "/n/meta_000010.json";
  m.extra["chat_rl"] = {{"task", "GSM8K"}};
  LoopState st;
  st.step = 7;
  st.val_bpb = 1.25;
  nlohmann::json file = m.to_json();
  file.update(st.to_json());
  const RunMeta back = RunMeta::from_json(nlohmann::json::parse(file.dump()), "meta_000007.json");
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_FALSE(back.to_json().contains("step"));
  EXPECT_FALSE(back.to_json().contains("loop_state"));
  EXPECT_EQ(LoopState::from_json(file).step, 7);
  EXPECT_TRUE(back.one_rank_stream());
  EXPECT_EQ(back.dtype_or_float32(), "bfloat16");
}

// An absent field stays absent (the file's fields are those of the version that wrote it).
TEST(RunMeta, AbsentFieldsStayAbsentAndTakeTheirMeaning) {
  RunMeta m;
  m.model_config = small_model();
  m.world_size = 2;
  const nlohmann::json j = m.to_json();
  for (const char* k : {"device_batch_size", "max_seq_len", "total_batch_size", "dtype", "data_stream",
                        "tokenizer_hash", "base_checkpoint", "muon_weight_decay", "imported_from"})
    EXPECT_FALSE(j.contains(k)) << k;
  const RunMeta back = RunMeta::from_json(j, "m.json");
  EXPECT_FALSE(back.one_rank_stream()) << "two ranks without data_stream read rank-strided streams";
  EXPECT_EQ(back.dtype_or_float32(), "float32");
  nlohmann::json one = j;
  one.erase("world_size");
  EXPECT_EQ(RunMeta::from_json(one, "m.json").world_size, 1);
  EXPECT_TRUE(RunMeta::from_json(one, "m.json").one_rank_stream());
}

// nanochat's base_train meta (a fixture in its format): nulls are absent, the loop state is not
// the run's.
TEST(RunMeta, ReadsNanochatsMeta) {
  const std::string path = std::string(NANOCHAT_TEST_DATA) + "/interop/nanochat/base_checkpoints/d1/meta_000003.json";
  std::string text = read_file(path);
  text.replace(text.find("Infinity"), 8, "1e308");  // Python's bare token; not a run field
  nlohmann::json meta = nlohmann::json::parse(text);
  RunMeta m = RunMeta::from_json(meta, path);
  EXPECT_EQ(m.model_config.n_embd, 32);
  EXPECT_EQ(m.user_config.value("run", ""), "fixture");
  EXPECT_EQ(m.device_batch_size, 2);
  EXPECT_EQ(m.total_batch_size, 256);
  EXPECT_EQ(m.world_size, 1);
  EXPECT_TRUE(m.extra.empty()) << m.extra.dump();
  meta["device_batch_size"] = nullptr;
  EXPECT_FALSE(RunMeta::from_json(meta, path).device_batch_size.has_value());
}

TEST(RunMeta, AFieldOfTheWrongTypeNamesTheFileAndTheField) {
  RunMeta m;
  m.model_config = small_model();
  nlohmann::json j = m.to_json();
  j["world_size"] = "two";
  try {
    RunMeta::from_json(j, "/x/meta_000004.json");
    FAIL() << "accepted " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/x/meta_000004.json: world_size"), std::string::npos) << e.what();
  }
  j = m.to_json();
  j.erase("model_config");
  EXPECT_THROW(RunMeta::from_json(j, "m.json"), Error);
}

// A checkpoint resumes only with the model, total batch and sequence length it was written with.
TEST(RunMeta, CheckResumeNamesTheFileAndTheDifference) {
  BaseTrainArgs a;
  a.depth = 2;
  a.max_seq_len = 64;
  a.device_batch_size = 2;
  a.total_batch_size = 256;
  a.num_iterations = 3;
  const auto p = derive_plan(a, 256, 1);
  nlohmann::json meta{
      {"model_config", p.model.to_json()}, {"total_batch_size", 256}, {"device_batch_size", 2}, {"world_size", 2}};
  EXPECT_NO_THROW(check_resume(p, RunMeta::from_json(meta, "m.json"), "m.json"));
  auto expect_error = [&](const nlohmann::json& m, const std::string& part) {
    try {
      check_resume(p, RunMeta::from_json(m, "m.json"), "m.json");
      FAIL() << "accepted " << m.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
    }
  };
  auto m = meta;
  m["total_batch_size"] = 512;
  expect_error(m, "--total-batch-size 512 and --max-seq-len 64");
  m = meta;
  m["max_seq_len"] = 32;
  expect_error(m, "--max-seq-len 32");
  m = meta;
  m["device_batch_size"] = 1;  // another micro-batch size reads the same rows
  EXPECT_NO_THROW(check_resume(p, RunMeta::from_json(m, "m.json"), "m.json"));
  m = meta;
  m["world_size"] = 0;
  expect_error(m, "world_size 0");
  m = meta;
  m["model_config"]["n_layer"] = 3;
  expect_error(m, "model_config");
}

}  // namespace
}  // namespace nanochat
