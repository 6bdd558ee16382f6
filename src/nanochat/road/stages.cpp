#include "nanochat/road/stages.h"

#include <algorithm>

#include "nanochat/core/error.h"

namespace nanochat::road {

namespace {

using Cmd = std::vector<std::string>;

// The sizes that differ between the presets.
struct Preset {
  Cmd tok_train, base_train, base_eval, chat_sft, chat_eval, chat_rl;
  int shards = 8;              // online: train shards downloaded (runcpu.sh: -n 8)
  int64_t sft_examples = 400;  // offline: conversations per synthetic task (Identity has 100)
  int64_t sft_val = 40;
  bool rl = true;
};

Preset preset_of(const std::string& name) {
  Preset p;
  if (name == "runcpu") {
    // nanochat runs/runcpu.sh (92d63d4), stage for stage
    p.tok_train = {"tok-train", "--max-chars", "2000000000"};
    p.base_train = {"base-train", "--depth",        "6",   "--head-dim",          "64",     "--window-pattern",
                    "L",          "--max-seq-len",  "512", "--device-batch-size", "32",     "--total-batch-size",
                    "16384",      "--eval-every",   "100", "--eval-tokens",       "524288", "--core-metric-every",
                    "-1",         "--sample-every", "100", "--num-iterations",    "5000",   "--save-every",
                    "500"};
    p.base_eval = {"base-eval", "--device-batch-size", "1", "--split-tokens", "16384", "--max-per-task", "16"};
    p.chat_sft = {"chat-sft", "--eval-every", "200", "--eval-tokens", "524288", "--num-iterations",
                  "1500",     "--save-every", "500"};
    p.chat_eval = {"chat-eval", "-x", "256"};
    p.chat_rl = {"chat-rl", "--num-steps",         "20", "--examples-per-step", "8",   "--num-samples",
                 "8",       "--device-batch-size", "8",  "--max-new-tokens",    "128", "--eval-every",
                 "10",      "--eval-examples",     "64", "--save-every",        "10"};
    p.sft_examples = 5000;
    p.sft_val = 200;
    p.rl = false;  // runcpu.sh stops after chat-sft
    return p;
  }
  if (name == "tiny") {
    p.tok_train = {"tok-train", "--vocab-size", "4096", "--max-chars", "10000000"};
    p.base_train = {"base-train", "--depth",
                    "4",          "--max-seq-len",
                    "256",        "--window-pattern",
                    "L",          "--device-batch-size",
                    "8",          "--total-batch-size",
                    "4096",       "--num-iterations",
                    "60",         "--eval-every",
                    "20",         "--eval-tokens",
                    "32768",      "--core-metric-every",
                    "-1",         "--sample-every",
                    "-1",         "--save-every",
                    "20"};
    p.base_eval = {"base-eval", "--split-tokens", "16384", "--max-per-task", "4"};
    p.chat_sft = {"chat-sft", "--num-iterations", "13", "--eval-every", "6", "--eval-tokens",
                  "8192",     "--chatcore-every", "-1", "--save-every", "6"};
    p.chat_eval = {"chat-eval", "-x", "32", "-m", "64"};
    p.chat_rl = {"chat-rl", "--num-steps",         "4",  "--examples-per-step", "4",  "--num-samples",
                 "4",       "--device-batch-size", "4",  "--max-new-tokens",    "32", "--eval-every",
                 "2",       "--eval-examples",     "16", "--save-every",        "2"};
    p.shards = 2;
    return p;
  }
  fail("--preset ", name, ": not a preset (presets: tiny, runcpu)");
}

Cmd with(Cmd c, std::initializer_list<std::string> more) {
  c.insert(c.end(), more);
  return c;
}

bool has_flag(const Cmd& c, std::initializer_list<const char*> names) {
  for (const auto& w : c)
    for (const char* n : names)
      if (w == n || w.rfind(std::string(n) + "=", 0) == 0) return true;
  return false;
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny", "runcpu"}; }

std::string flag_value(const std::vector<std::string>& command, const std::string& flag) {
  std::string v;
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i] == flag && i + 1 < command.size())
      v = command[i + 1];
    else if (command[i].rfind(flag + "=", 0) == 0)
      v = command[i].substr(flag.size() + 1);
  }
  return v;
}

bool apply_override(std::vector<std::string>& command, const FlagOverride& ov) {
  if (command.empty() || command[0] != ov.command) return false;
  std::vector<std::string> out{command[0]};
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& w = command[i];
    bool match = false, inline_value = false;
    for (const auto& n : ov.names) {
      if (w == n)
        match = true;
      else if (w.rfind(n + "=", 0) == 0)
        match = inline_value = true;
    }
    if (!match) {
      out.push_back(w);
      continue;
    }
    if (ov.takes_value && !inline_value) ++i;  // drop its value too
  }
  out.push_back(ov.names.front());
  if (ov.takes_value) out.push_back(ov.value);
  command = std::move(out);
  return true;
}

std::string road_model_tag(const std::vector<Stage>& stages, const RoadOptions& o) {
  if (!o.model_tag.empty()) return o.model_tag;
  for (const Stage& s : stages)
    for (const auto& c : s.commands)
      if (!c.empty() && c[0] == "base-train") {
        const std::string d = flag_value(c, "--depth");
        return "d" + (d.empty() ? std::string("20") : d);
      }
  return "d20";
}

namespace {

// Offline: the demo corpus (made from Debian's text packages when the data folder has no shards
// yet); online: nanochat's shards, the CORE bundle and the chat datasets.
Stage data_stage(const RoadOptions& o, const Preset& p) {
  Stage data{"data", "Data", {}, "", {o.data_dir + "/*.parquet"}, "", false};
  if (o.offline) {
    if (!o.demo_corpus_script.empty()) data.commands.push_back({"!bash", o.demo_corpus_script});
    return data;
  }
  data.commands.push_back({"data", "download", "-n", std::to_string(p.shards)});
  data.commands.push_back({"data", "download", "--eval-bundle"});
  data.commands.push_back({"data", "download", "--tasks"});
  return data;
}

// Offline: SpellingBee, Arithmetic and Identity as conversation files, chat-sft trained on them
// (no ChatCORE: its tasks are online); returns the chat-eval tasks (online: ChatCORE's five).
Cmd add_offline_sft_data(std::vector<Stage>& road, const RoadOptions& o, const Preset& p, Cmd& sft) {
  const std::string dir = o.base_dir + "/speedrun/sft";
  Stage sd{"sft-data", "Offline chat tasks", {}, "", {"speedrun/sft"}, "", false};
  std::string train, val;
  for (const std::string name : {"SpellingBee", "Arithmetic", "Identity"}) {
    Cmd tr{"data", "task-jsonl", name, "-o", dir + "/" + name + ".jsonl"};
    Cmd va{"data", "task-jsonl", name, "--split", "test", "-o", dir + "/" + name + "-val.jsonl"};
    if (name != "Identity") {  // Identity has 100 train and 5 test conversations, all taken
      tr = with(tr, {"--stop", std::to_string(p.sft_examples)});
      va = with(va, {"--stop", std::to_string(p.sft_val)});
    }
    sd.commands.push_back(tr);
    sd.commands.push_back(va);
    train += (train.empty() ? "" : ",") + dir + "/" + name + ".jsonl";
    val += (val.empty() ? "" : ",") + dir + "/" + name + "-val.jsonl";
  }
  road.push_back(sd);
  sft = with(sft, {"--train-jsonl", train, "--val-jsonl", val});
  if (!has_flag(sft, {"--chatcore-every"})) sft = with(sft, {"--chatcore-every", "-1"});
  return {"-a", "SpellingBee|Arithmetic"};
}

void add_chat_stages(std::vector<Stage>& road, const RoadOptions& o, const Preset& p) {
  Cmd sft = p.chat_sft;
  const Cmd eval_tasks = o.offline ? add_offline_sft_data(road, o, p, sft) : Cmd{};
  road.push_back({"chat-sft", "Chat SFT", {sft}, "chatsft_checkpoints", {}, "chat-sft", true});
  Cmd ev_sft = p.chat_eval;
  ev_sft.insert(ev_sft.end(), eval_tasks.begin(), eval_tasks.end());
  road.push_back({"chat-eval-sft",
                  "Chat evaluation sft",
                  {with(ev_sft, {"-i", "sft"})},
                  "",
                  {"report/chat-evaluation-sft.json"},
                  "chat-evaluation-sft",
                  false});
  if (!o.rl.value_or(p.rl)) return;
  const std::string task = o.offline ? "Arithmetic" : "GSM8K";
  road.push_back(
      {"chat-rl", "Chat RL", {with(p.chat_rl, {"--task", task})}, "chatrl_checkpoints", {}, "chat-rl", true});
  road.push_back({"chat-eval-rl",
                  "Chat evaluation rl",
                  {with(p.chat_eval, {"-i", "rl", "-a", task})},
                  "",
                  {"report/chat-evaluation-rl.json"},
                  "chat-evaluation-rl",
                  false});
}

// The user's flags, then the model tag on every stage that reads or writes the model (unless a
// flag names it) and the training stages' checkpoint folders.
void apply_flags_and_tag(std::vector<Stage>& road, const RoadOptions& o) {
  for (Stage& s : road)
    for (Cmd& c : s.commands)
      for (const FlagOverride& ov : o.overrides) apply_override(c, ov);
  const std::string tag = road_model_tag(road, o);
  for (Stage& s : road) {
    for (Cmd& c : s.commands) {
      if (c.empty()) continue;
      if ((c[0] == "base-train" || c[0] == "chat-sft" || c[0] == "chat-rl") && !has_flag(c, {"--model-tag"}))
        c = with(c, {"--model-tag", tag});
      if ((c[0] == "base-eval" || c[0] == "chat-eval") && !has_flag(c, {"-g", "--model-tag"})) c = with(c, {"-g", tag});
    }
    if (!s.checkpoint_dir.empty()) {
      s.checkpoint_dir += "/" + tag;
      s.outputs = {s.checkpoint_dir};
    }
  }
}

}  // namespace

std::vector<Stage> plan_road(const RoadOptions& o) {
  const Preset p = preset_of(o.preset);
  std::vector<Stage> road{data_stage(o, p)};
  road.push_back({"tok-train", "Tokenizer training", {p.tok_train}, "", {"tokenizer"}, "tokenizer-training", false});
  road.push_back({"tok-eval",
                  "Tokenizer evaluation",
                  {{"tok-eval"}},
                  "",
                  {"report/tokenizer-evaluation.json"},
                  "tokenizer-evaluation",
                  false});
  road.push_back(
      {"base-train", "Base model training", {p.base_train}, "base_checkpoints", {}, "base-model-training", true});
  Cmd base_eval = p.base_eval;
  if (o.offline && !o.eval_bundle_present) base_eval = with(base_eval, {"--eval", "bpb,sample"});
  road.push_back({"base-eval",
                  "Base model evaluation",
                  {base_eval},
                  "",
                  {"report/base-model-evaluation.json"},
                  "base-model-evaluation",
                  false});
  add_chat_stages(road, o, p);
  apply_flags_and_tag(road, o);
  return road;
}

}  // namespace nanochat::road
