#include "nanochat/checkpoint/model_io.h"

#include <cstring>
#include <filesystem>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/model/gpt.h"

namespace fs = std::filesystem;

namespace nanochat {

std::string default_model_tag(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    fail("no checkpoints under ", root, "; train a model first with 'nanochat base-train'");
  std::string best_d, newest;
  int64_t best_n = -1;
  fs::file_time_type newest_t{};
  for (auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory() || complete_checkpoint_steps(e.path().string()).empty()) continue;
    const std::string name = e.path().filename().string();
    const int64_t n = parse_suffix_number(name, "d");
    if (n >= 0 && n > best_n) {
      best_n = n;
      best_d = name;
    }
    auto t = fs::last_write_time(e.path(), ec);
    if (newest.empty() || t > newest_t) {
      newest = name;
      newest_t = t;
    }
  }
  if (!best_d.empty()) return best_d;
  if (!newest.empty()) return newest;
  fail("no complete checkpoint under ", root, "; train a model first with 'nanochat base-train'");
}

const char* checkpoint_source_name(CheckpointSource s) {
  switch (s) {
    case CheckpointSource::Base:
      return "base";
    case CheckpointSource::Sft:
      return "sft";
    case CheckpointSource::Rl:
      return "rl";
  }
  return "?";
}

const char* checkpoint_source_folder(CheckpointSource s) {
  switch (s) {
    case CheckpointSource::Base:
      return "base_checkpoints";
    case CheckpointSource::Sft:
      return "chatsft_checkpoints";
    case CheckpointSource::Rl:
      return "chatrl_checkpoints";
  }
  return "?";
}

CheckpointSource parse_checkpoint_source(const std::string& name) {
  if (name == "base") return CheckpointSource::Base;
  if (name == "sft") return CheckpointSource::Sft;
  if (name == "rl") return CheckpointSource::Rl;
  fail("unknown checkpoint source '", name, "' for -i/--source (want base, sft or rl)");
}

namespace {
// What writes a source's checkpoints, for error messages.
const char* source_writer(CheckpointSource s) {
  switch (s) {
    case CheckpointSource::Base:
      return "nanochat base-train";
    case CheckpointSource::Sft:
      return "nanochat chat-sft";
    case CheckpointSource::Rl:
      return "nanochat chat-rl";
  }
  return "?";
}
}  // namespace

LoadedModel load_trained_model(const std::string& tag_in, int64_t step, CheckpointSource source) {
  const std::string root = base_dir() + "/" + checkpoint_source_folder(source);
  std::error_code ec;
  if (source != CheckpointSource::Base && !fs::is_directory(root, ec))
    fail("no ", checkpoint_source_name(source), " checkpoints: ", root, " does not exist; it is written by '",
         source_writer(source), "' (or pass -i base to use a base-train checkpoint)");
  LoadedModel out;
  out.tag = tag_in.empty() ? default_model_tag(root) : tag_in;
  out.dir = root + "/" + out.tag;
  if (step < 0) {
    auto last = last_complete_step(out.dir);
    if (!last) fail("no complete checkpoint in ", out.dir, "; check --model-tag or train first");
    step = *last;
  }
  out.step = step;
  CheckpointPaths cp{out.dir, step};
  const nlohmann::json marker = read_checkpoint_marker(cp);
  for (const std::string& f : {cp.model(), cp.meta()}) {
    const std::string bad = check_checkpoint_file(marker, f);
    if (bad.empty()) continue;
    auto intact = newest_intact_step(out.dir, step, [](const CheckpointPaths& c) {
      return std::vector<std::string>{c.model(), c.meta()};
    });
    if (intact) fail(bad, ". The newest intact checkpoint in ", out.dir, " is step ", *intact, ": pass -s ", *intact);
    fail(bad, ". ", out.dir, " holds no other intact checkpoint");
  }
  out.meta = read_checkpoint_meta(cp);
  out.run = RunMeta::from_json(out.meta, cp.meta());
  out.model = std::make_unique<GPT>(out.run.model_config);
  StFile w = load_safetensors(cp.model());
  for (const auto& p : out.model->params()) {
    const StTensor& t = w.at(p.name);
    if (t.shape != p.shape)
      fail("checkpoint ", cp.model(), ": tensor ", p.name, " has a shape that does not match its model_config");
    std::vector<float> v = t.to_f32();
    std::memcpy(out.model->param_data() + p.offset, v.data(), p.numel * sizeof(float));
  }
  return out;
}

void require_tokenizer_vocab(const LoadedModel& lm, int tokenizer_vocab) {
  if (lm.model->config().vocab_size != tokenizer_vocab)
    fail("checkpoint ", lm.dir, " has vocab ", lm.model->config().vocab_size, " but the tokenizer in ", tokenizer_dir(),
         " has ", tokenizer_vocab, "; use the tokenizer the model was trained with");
}

InferenceModel load_for_inference(CheckpointSource source, const std::string& tag, int64_t step) {
  InferenceModel im;
  im.source = source;
  im.tokenizer = Tokenizer::load(tokenizer_dir());
  im.lm = load_trained_model(tag, step, source);
  require_tokenizer_vocab(im.lm, im.tokenizer.vocab_size());
  return im;
}

}  // namespace nanochat
