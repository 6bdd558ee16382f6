#include "nanochat/road/card.h"

#include <cmath>
#include <fstream>
#include <optional>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/version.h"

namespace nanochat::road {

using ojson = nlohmann::ordered_json;

namespace {

// The sections in road order, with the stage ids that write them (hand-run stages have no id).
struct SectionOf {
  const char* slug;
  const char* stage;
};
constexpr SectionOf kSections[] = {
    {"tokenizer-training", "tok-train"},
    {"tokenizer-evaluation", "tok-eval"},
    {"base-model-training", "base-train"},
    {"base-model-evaluation", "base-eval"},
    {"chat-sft", "chat-sft"},
    {"chat-evaluation-sft", "chat-eval-sft"},
    {"chat-rl", "chat-rl"},
    {"chat-evaluation-rl", "chat-eval-rl"},
};
// The chat tasks in the table's order (ChatCORE last, as nanochat's card).
constexpr const char* kChatMetrics[] = {"ARC-Easy",  "ARC-Challenge", "MMLU",       "GSM8K",
                                        "HumanEval", "SpellingBee",   "Arithmetic", "Identity"};

std::optional<ojson> data_of(const std::string& dir, const std::string& slug) {
  auto s = read_report_section(slug, dir);
  if (!s) return std::nullopt;
  return (*s)["data"];
}

std::string num(const ojson& d, const char* key, int decimals) {
  if (!d.contains(key) || !d[key].is_number()) return "-";
  return fixed(d[key].get<double>(), decimals);
}

std::string percent(const ojson& d, const std::string& key) {
  if (!d.contains(key) || !d[key].is_number()) return "-";
  return fixed(100.0 * d[key].get<double>(), 2) + "%";
}

// A float as its stage printed it: up to 6 decimals, no trailing zeros ("2.85092", "0.25").
std::string trimmed(double v) {
  std::string t = fixed(v, 6);
  while (t.size() > 1 && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

// Each value of a section as a line of the card (lists and objects compact, samples as text).
std::string section_lines(const ojson& d) {
  std::string out;
  for (const auto& [k, v] : d.items()) {
    if (k == "samples" && v.is_array()) {
      out += "- samples:\n\n```\n";
      for (const auto& s : v) out += (s.is_string() ? s.get<std::string>() : s.dump()) + "\n";
      out += "```\n";
      continue;
    }
    std::string text;
    if (v.is_number_float())
      text = trimmed(v.get<double>());
    else if (v.is_number_integer())
      text = v.get<int64_t>() >= 10000 ? with_commas(v.get<int64_t>()) : v.dump();
    else if (v.is_string())
      text = v.get<std::string>();
    else
      text = v.dump();
    out += "- " + k + ": " + text + "\n";
  }
  return out;
}

}  // namespace

std::string duration_text(double seconds) {
  if (!(seconds >= 0)) return "-";
  if (seconds < 60) return fixed(seconds, 1) + "s";
  const int64_t s = std::llround(seconds);
  char b[48];
  if (s < 3600)
    std::snprintf(b, sizeof b, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(b, sizeof b, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  return b;
}

std::vector<std::vector<std::string>> metrics_table(const std::string& dir) {
  std::vector<std::vector<std::string>> rows;
  const ojson none = ojson::object();
  const ojson base_train = data_of(dir, "base-model-training").value_or(none);
  const ojson base_eval = data_of(dir, "base-model-evaluation").value_or(none);
  const ojson sft = data_of(dir, "chat-sft").value_or(none);
  const ojson eval_sft = data_of(dir, "chat-evaluation-sft").value_or(none);
  const ojson rl = data_of(dir, "chat-rl").value_or(none);
  const ojson eval_rl = data_of(dir, "chat-evaluation-rl").value_or(none);
  // val bpb: base-eval's when it ran, else the training run's last evaluation
  const std::string base_bpb =
      base_eval.contains("val bpb") ? num(base_eval, "val bpb", 6) : num(base_train, "val_bpb", 6);
  rows.push_back({"val bpb", base_bpb, num(sft, "val_bpb", 6), "-"});
  rows.push_back({"CORE", num(base_eval, "CORE", 4), "-", "-"});
  for (const char* t : kChatMetrics)
    if (eval_sft.contains(t) || eval_rl.contains(t))
      rows.push_back({t, "-", percent(eval_sft, t), percent(eval_rl, t)});
  if (rl.contains("pass@k") && rl["pass@k"].is_array() && !rl["pass@k"].empty())
    rows.push_back(
        {"RL pass@1 (" + rl.value("task", std::string("?")) + ")", "-", "-", fixed(rl["pass@k"][0].get<double>(), 4)});
  rows.push_back({"ChatCORE", "-", num(eval_sft, "ChatCORE", 4), num(eval_rl, "ChatCORE", 4)});
  return rows;
}

namespace {

bool is_speedrun(const nlohmann::json& ledger) { return ledger.is_object() && ledger.contains("road"); }

// The build, the base folder, the road's command and the nodes with their share of the rows.
std::string environment_md(const std::string& dir, const nlohmann::json& ledger, const std::vector<NodeInfo>& nodes,
                           const std::string& base_dir) {
  std::string md = "## Environment\n\n- Build: nanochat.cpp " + std::string(build_id()) + "\n";
  md += "- Base folder: " + base_dir + "\n";
  if (is_speedrun(ledger)) {
    const auto& r = ledger["road"];
    md += "- Road: `nanochat speedrun` preset " + r.value("preset", std::string("?")) +
          (r.value("offline", false) ? ", offline" : ", online") + ", model tag " +
          r.value("model_tag", std::string("?")) + ", started " + r.value("started", std::string("?")) + "\n";
    if (r.contains("command")) md += "- Command: `" + r["command"].get<std::string>() + "`\n";
  }
  md += "\n| Node | Host | CPU | Cores | ISA | Memory | Share of the work |\n|---|---|---|---|---|---|---|\n";
  auto row = [&md](const std::string& node, const NodeInfo& n, const std::string& share) {
    md += str_cat("| ", node, " | ", n.host, " | ", n.cpu.empty() ? "?" : n.cpu, " | ", n.cores, " cores, ", n.logical,
                  " threads | ", n.isa, " | ", fixed(n.memory_gib, 1), " GiB | ", share, " |\n");
  };
  const ojson bt = data_of(dir, "base-model-training").value_or(ojson::object());
  if (bt.contains("nodes") && bt["nodes"].is_array() && !bt["nodes"].empty()) {  // base-train's nodes
    const size_t count = bt["nodes"].size();
    for (const auto& n : bt["nodes"]) {
      const double share = n.value("share", -1.0);
      row(str_cat(n.value("node", 0)), MachineInfo::from_json(nlohmann::json::parse(n.dump())),
          count == 1   ? "100%"
          : share >= 0 ? fixed(100.0 * share, 1) + "% of base-train's rows"
                       : "-");
    }
    return md;
  }
  for (size_t i = 0; i < nodes.size(); ++i) row(str_cat(i), nodes[i], "100%");
  return md;
}

// One row per stage: wall time and planned time (the speedrun ledger), tokens, tok/s and MFU (the
// training stages' sections), CPU-hours (wall time x the threads the stage ran on); the totals.
std::string stages_md(const std::string& dir, const nlohmann::json& ledger, const std::vector<NodeInfo>& nodes) {
  const bool speedrun = is_speedrun(ledger);
  std::string md =
      "\n## Stages\n\n| Stage | Wall time | Planned | Tokens | tok/s | MFU | CPU-hours "
      "|\n|---|---|---|---|---|---|---|\n";
  double total = 0, planned_total = 0, cpu_hours = 0;
  const int cores = nodes.empty() ? 1 : std::max(1, nodes[0].logical);
  auto stage_row = [&](const std::string& id, const std::string& title, const std::string& slug) {
    const nlohmann::json st = speedrun && ledger["stages"].contains(id) ? ledger["stages"][id] : nlohmann::json();
    const double secs = st.is_object() && st.contains("seconds") ? st["seconds"].get<double>() : -1;
    const nlohmann::json plans = speedrun ? ledger.value("plan", nlohmann::json::object()) : nlohmann::json::object();
    const double plan =
        plans.contains("stages") && plans["stages"].contains(id) ? plans["stages"][id].value("seconds", -1.0) : -1;
    const ojson d = slug.empty() ? ojson::object() : data_of(dir, slug).value_or(ojson::object());
    if (secs < 0 && d.empty()) return;
    int threads = cores * static_cast<int>(std::max<size_t>(1, nodes.size()));
    if (d.contains("threads_per_rank") && d.contains("world_size"))
      threads = d["threads_per_rank"].get<int>() * d["world_size"].get<int>();
    const double ch = secs > 0 ? secs * threads / 3600.0 : -1;
    if (secs > 0) total += secs, cpu_hours += ch;
    if (plan > 0) planned_total += plan;
    md += "| " + title + " | " + duration_text(secs) + " | " + duration_text(plan) + " | " +
          (d.contains("tokens") ? with_commas(d["tokens"].get<int64_t>()) : "-") + " | " +
          (d.contains("tok_per_sec") ? with_commas(d["tok_per_sec"].get<int64_t>()) : "-") + " | " +
          (d.contains("mfu_percent") ? fixed(d["mfu_percent"].get<double>(), 2) + "%" : "-") + " | " +
          (ch >= 0 ? fixed(ch, 3) : "-") + " |\n";
  };
  if (speedrun && ledger["road"].contains("order")) {
    for (const auto& s : ledger["road"]["order"])
      stage_row(s["id"].get<std::string>(), s["title"].get<std::string>(), s.value("section", std::string()));
  } else {
    for (const auto& s : kSections)
      if (auto sec = read_report_section(s.slug, dir)) stage_row(s.stage, (*sec)["title"].get<std::string>(), s.slug);
  }
  if (!speedrun) return md;
  md += "\nTotal wall clock time: " + duration_text(total);
  if (planned_total > 0)
    md += str_cat(" (planned ", duration_text(planned_total), ", ", total >= planned_total ? "+" : "",
                  fixed(100.0 * (total - planned_total) / planned_total, 0), "%)");
  return md + ", " + fixed(cpu_hours, 3) + " CPU-hours\n";
}

// "rank 1 left at step 2, 1 rank joined at step 4": the changes of the job's nodes that a training
// run's metrics.jsonl records (train/metrics_log.h); "" when there were none or the file is gone.
std::string membership_changes(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("membership") || !j["membership"].is_string()) continue;
    out +=
        str_cat(out.empty() ? "" : ", ", j["membership"].get<std::string>(), " at step ", j.value("step", int64_t{0}));
  }
  return out;
}

// Each stage's own section, as it wrote it, with its chart and the nodes that left or joined it.
std::string sections_md(const std::string& dir) {
  std::string md;
  for (const auto& s : kSections) {
    auto sec = read_report_section(s.slug, dir);
    if (!sec) continue;
    const ojson& d = (*sec)["data"];
    md += "\n## " + (*sec)["title"].get<std::string>() +
          "\n\ntimestamp: " + (*sec).value("timestamp", std::string("?")) + "\n\n" + section_lines(d);
    std::string metrics = d.contains("metrics") ? d["metrics"].get<std::string>() : std::string();
    if (d.contains("checkpoint_dir")) {
      const std::string svg = d["checkpoint_dir"].get<std::string>() + "/report.svg";
      md += "- chart: [" + svg + "](" + svg + ")\n";
      metrics = d["checkpoint_dir"].get<std::string>() + "/metrics.jsonl";
    }
    if (const std::string changes = membership_changes(metrics); !changes.empty())
      md += "- nodes that left or joined: " + changes + "\n";
  }
  return md;
}

}  // namespace

std::string render_card(const std::string& dir, const nlohmann::json& ledger, const std::vector<NodeInfo>& nodes,
                        const std::string& base_dir) {
  std::string md = "# nanochat.cpp report card\n\nGenerated: " + local_timestamp() + "\n\n";
  md += environment_md(dir, ledger, nodes, base_dir);
  md += stages_md(dir, ledger, nodes);
  md += "\n## Summary\n\n| Metric | BASE | SFT | RL |\n|---|---|---|---|\n";
  for (const auto& row : metrics_table(dir))
    md += "| " + row[0] + " | " + row[1] + " | " + row[2] + " | " + row[3] + " |\n";
  return md + sections_md(dir);
}

}  // namespace nanochat::road
