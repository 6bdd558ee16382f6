// Tasks by name (registry.h).
#include "nanochat/tasks/registry.h"

#include <memory>

#include "nanochat/core/error.h"
#include "nanochat/tasks/hub_tasks.h"
#include "nanochat/tasks/synthetic.h"

namespace nanochat::tasks {

namespace {

struct HubTaskInfo {
  const char* name;
  const char* repo;
  std::vector<std::string> subsets, splits;  // the first of each is the default
};

const std::vector<HubTaskInfo>& hub_tasks() {
  static const std::vector<HubTaskInfo> infos = {
      {"SmolTalk", "HuggingFaceTB/smol-smoltalk", {"default"}, {"train", "test"}},
      {"MMLU", "cais/mmlu", {"all"}, {"test", "auxiliary_train", "validation", "dev"}},
      {"GSM8K", "openai/gsm8k", {"main", "socratic"}, {"test", "train"}},
      {"ARC-Easy", "allenai/ai2_arc", {"ARC-Easy"}, {"test", "train", "validation"}},
      {"ARC-Challenge", "allenai/ai2_arc", {"ARC-Challenge"}, {"test", "train", "validation"}},
      {"HumanEval", "openai/openai_humaneval", {"openai_humaneval"}, {"test"}},
  };
  return infos;
}

const char* const kSynthetic[] = {"SpellingBee", "Arithmetic", "Identity"};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string all_names() {
  std::vector<std::string> names = hub_task_names();
  for (const char* s : kSynthetic) names.push_back(s);
  return join(names);
}

const std::string& pick(const std::string& task, const char* what, const std::string& given,
                        const std::vector<std::string>& known) {
  if (given.empty()) return known.front();
  for (const auto& k : known)
    if (k == given) return k;
  fail("task ", task, ": ", what, " \"", given, "\" is not one of ", join(known));
}

TaskPtr open_unsliced(const std::string& name, const std::string& subset, const std::string& split,
                      const TaskOptions& o) {
  if (name == "SpellingBee" || name == "Arithmetic" || name == "Identity") {
    if (!subset.empty() && subset != "default")
      fail("task ", name, ": subset \"", subset, "\" is not known (synthetic tasks have none)");
    const std::string sp = split.empty() ? "train" : split;
    if (name == "SpellingBee")
      return make_spelling_bee(sp, o.words_path.empty() ? "/usr/share/dict/words" : o.words_path);
    if (name == "Arithmetic") return make_arithmetic(sp);
    return make_identity(sp);
  }
  for (const auto& info : hub_tasks()) {
    if (name != info.name) continue;
    HubSource src{info.repo, pick(name, "subset", subset, info.subsets), pick(name, "split", split, info.splits)};
    const std::string dir = hub_dataset_dir(src, o.base_dir);
    bool in_defaults = false;
    for (const auto& [n, d] : default_hub_downloads())
      in_defaults |= n == name && d.subset == src.subset && d.split == src.split;
    const std::string dl = hub_download_command(in_defaults ? name : name + "/" + src.subset + "/" + src.split);
    if (name == "SmolTalk") return make_smoltalk(dir, dl);
    if (name == "MMLU") return make_mmlu(dir, dl);
    if (name == "GSM8K") return make_gsm8k(dir, dl);
    if (name == "HumanEval") return make_humaneval(dir, dl);
    return make_arc(name, dir, dl);
  }
  fail("task \"", name, "\" is not known; known tasks: ", all_names());
}

}  // namespace

TaskPtr open_task(const std::string& name, const std::string& subset, const std::string& split, const TaskOptions& o) {
  TaskPtr t = open_unsliced(name, subset, split, o);
  if (o.start == 0 && o.stop < 0 && o.step == 1) return t;
  return std::make_shared<TaskSlice>(t, o.start, o.stop, o.step);
}

std::vector<HubSource> hub_sources(const std::string& name) {
  for (const auto& info : hub_tasks()) {
    if (name != info.name) continue;
    std::vector<HubSource> out;
    for (const auto& sub : info.subsets)
      for (const auto& sp : info.splits) out.push_back({info.repo, sub, sp});
    return out;
  }
  for (const char* s : kSynthetic)
    if (name == s) fail("task ", name, " is made on this machine and needs no download");
  fail("task \"", name, "\" is not a downloadable task; those are: ", join(hub_task_names()));
}

std::vector<std::string> hub_task_names() {
  std::vector<std::string> out;
  for (const auto& info : hub_tasks()) out.push_back(info.name);
  return out;
}

std::vector<std::pair<std::string, HubSource>> default_hub_downloads() {
  // chat_sft: SmolTalk train/test, MMLU auxiliary_train/test, GSM8K main train/test;
  // chat_eval: ARC-Easy/Challenge test, MMLU test, GSM8K main test, HumanEval test.
  return {
      {"SmolTalk", {"HuggingFaceTB/smol-smoltalk", "default", "train"}},
      {"SmolTalk", {"HuggingFaceTB/smol-smoltalk", "default", "test"}},
      {"MMLU", {"cais/mmlu", "all", "auxiliary_train"}},
      {"MMLU", {"cais/mmlu", "all", "test"}},
      {"GSM8K", {"openai/gsm8k", "main", "train"}},
      {"GSM8K", {"openai/gsm8k", "main", "test"}},
      {"ARC-Easy", {"allenai/ai2_arc", "ARC-Easy", "test"}},
      {"ARC-Challenge", {"allenai/ai2_arc", "ARC-Challenge", "test"}},
      {"HumanEval", {"openai/openai_humaneval", "openai_humaneval", "test"}},
  };
}

}  // namespace nanochat::tasks
