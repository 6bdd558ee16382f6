// `nanochat data download --tasks` (data_tasks.h).
#include "nanochat/cli/data_tasks.h"

#include <cstdio>
#include <fstream>
#include <memory>

#include "nanochat/core/error.h"
#include "nanochat/tasks/registry.h"

namespace nanochat::cli {

void download_task_data(const std::vector<std::string>& specs, const std::string& hub_url, const std::string& base,
                        const data::DownloadOptions& opt) {
  std::vector<std::pair<std::string, tasks::HubSource>> want;
  const auto defaults = tasks::default_hub_downloads();
  if (specs.empty()) want = defaults;
  for (const std::string& spec : specs) {
    const size_t a = spec.find('/');
    const std::string name = spec.substr(0, a);
    if (name == "SpellingBee" || name == "Arithmetic" || name == "Identity") {
      std::printf("%s: made on this machine from its word list or rules; nothing to download\n", name.c_str());
      continue;
    }
    const auto sources = tasks::hub_sources(name);  // throws for an unknown name, listing the known ones
    if (a == std::string::npos) {
      for (const auto& d : defaults)
        if (d.first == name) want.push_back(d);
      continue;
    }
    const size_t b = spec.find('/', a + 1);
    if (b == std::string::npos)
      fail("data download --tasks ", spec, ": expected a task name or NAME/SUBSET/SPLIT (e.g. GSM8K/main/train)");
    const std::string subset = spec.substr(a + 1, b - a - 1), split = spec.substr(b + 1);
    bool found = false;
    std::string known;
    for (const auto& s : sources) {
      known += (known.empty() ? "" : ", ") + name + "/" + s.subset + "/" + s.split;
      if (s.subset == subset && s.split == split) {
        want.emplace_back(name, s);
        found = true;
      }
    }
    if (!found) fail("data download --tasks ", spec, ": not a dataset of ", name, "; those are: ", known);
  }
  std::vector<data::HubDataset> sets;
  for (const auto& [name, src] : want) {
    bool dup = false;
    for (const auto& s : sets) dup |= s.repo == src.repo && s.subset == src.subset && s.split == src.split;
    if (!dup) sets.push_back({src.repo, src.subset, src.split, tasks::hub_dataset_dir(src, base)});
  }
  if (sets.empty()) return;
  const auto r = data::download_hub_datasets(sets, hub_url, opt);
  std::printf("%zu dataset(s): %d downloaded (%d file(s), %d resumed), %d already present\n", sets.size(),
              r.datasets_fetched, r.files.downloaded, r.files.resumed, r.datasets_present);
}

void register_data_task_jsonl(CLI::App* data) {
  struct Args {
    std::string name, subset, split, out;
    int64_t start = 0, stop = -1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = data->add_subcommand(
      "task-jsonl",
      "Write a task's examples as conversation JSON lines (what chat-sft --train-jsonl reads); e.g. the synthetic "
      "SpellingBee, Arithmetic, Identity for training without network");
  c->add_option("name", a->name,
                "task (SmolTalk MMLU GSM8K ARC-Easy ARC-Challenge HumanEval SpellingBee Arithmetic Identity)")
      ->required();
  c->add_option("--subset", a->subset, "subset (default: the task's first)");
  c->add_option("--split", a->split, "split (default: the task's first; train for the synthetic tasks)");
  c->add_option("--start", a->start, "first example")->capture_default_str();
  c->add_option("--stop", a->stop, "end of the examples (-1 = all)")->capture_default_str();
  c->add_option("-o,--out", a->out, "output file (.jsonl)")->required();
  c->callback([a] {
    tasks::TaskOptions o;
    o.start = a->start;
    o.stop = a->stop;
    const tasks::TaskPtr t = tasks::open_task(a->name, a->subset, a->split, o);
    std::ofstream f(a->out, std::ios::binary | std::ios::trunc);
    if (!f) fail("data task-jsonl: cannot write ", a->out);
    for (int64_t i = 0; i < t->size(); ++i) f << conversation_to_json(t->get(i).conversation).dump() << "\n";
    f.flush();
    if (!f) fail("data task-jsonl: writing ", a->out, " failed (disk full?)");
    std::printf("%lld conversation(s) of %s written to %s\n", static_cast<long long>(t->size()), t->name().c_str(),
                a->out.c_str());
  });
}

}  // namespace nanochat::cli
