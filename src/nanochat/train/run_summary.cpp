#include "nanochat/train/run_summary.h"

#include <cmath>
#include <fstream>
#include <map>

#include "nanochat/checkpoint/loop_state.h"
#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/machine.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/threads.h"
#include "nanochat/plan/plan.h"

namespace nanochat {

RunSummary summarize_metrics(const std::string& metrics_path, int64_t tokens_per_step) {
  std::map<int64_t, nlohmann::json> train, val;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("loss"))
      train[step] = std::move(j);
    else if (j.contains("val_bpb"))
      val[step] = std::move(j);
  }
  RunSummary s;
  s.steps = static_cast<int64_t>(train.size());
  s.tokens = s.steps * tokens_per_step;
  const bool skip_first = train.size() > 10 && train.rbegin()->first > 10;
  std::vector<double> rows;
  for (const auto& [step, j] : train) {
    if (j.contains("rank_rows") && j["rank_rows"].is_array()) {
      const auto& rr = j["rank_rows"];
      if (rows.size() != rr.size()) rows.assign(rr.size(), 0.0);
      for (size_t r = 0; r < rr.size(); ++r) rows[r] += rr[r].is_number() ? rr[r].get<double>() : 0.0;
    }
    if (skip_first && step <= 10) continue;
    s.tok_per_sec += j.value("tok_per_sec", 0.0);
    s.mfu += j.value("mfu", 0.0);
    ++s.timed_steps;
  }
  if (s.timed_steps > 0) {
    s.tok_per_sec /= static_cast<double>(s.timed_steps);
    s.mfu /= static_cast<double>(s.timed_steps);
  }
  double all_rows = 0;
  for (double r : rows) all_rows += r;
  if (all_rows > 0)
    for (double r : rows) s.rank_share.push_back(r / all_rows);
  if (!val.empty() && val.rbegin()->second["val_bpb"].is_number())
    s.final_val_bpb = val.rbegin()->second["val_bpb"].get<double>();
  return s;
}

std::string run_summary_line(const RunSummary& s) {
  return str_cat("Run summary: ", with_commas(s.steps), " steps, ", with_commas(s.tokens), " tokens, ",
                 with_commas(static_cast<int64_t>(std::llround(s.tok_per_sec))), " tok/s and MFU ", fixed(s.mfu, 2),
                 "% (mean of ", s.timed_steps, " steps", s.timed_steps < s.steps ? " after step 10" : "", ")");
}

namespace {

// Each node's machine with its ranks and their share of the rows: `machines` (JSON of every rank,
// by rank, with its "node"), `rank_share` (by rank; empty: not recorded).
nlohmann::json nodes_of(const std::vector<std::string>& machines, const std::vector<double>& rank_share) {
  std::map<int, nlohmann::json> nodes;
  for (size_t r = 0; r < machines.size(); ++r) {
    const nlohmann::json j = nlohmann::json::parse(machines[r], nullptr, false);
    if (!j.is_object()) continue;
    nlohmann::json& n = nodes[j.value("node", 0)];
    if (n.is_null()) {
      n = j;
      n["ranks"] = nlohmann::json::array();
    }
    n["ranks"].push_back(r);
    if (r < rank_share.size()) n["share"] = n.value("share", 0.0) + rank_share[r];
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& [node, n] : nodes) out.push_back(n);
  return out;
}

}  // namespace

void report_training_run(const TrainPlan& plan, const LoopState& st, const std::string& metrics_path,
                         Communicator& comm) {
  nlohmann::json me = this_machine().to_json();
  me["node"] = cluster::env_int("GROUP_RANK").value_or(0);  // the launcher's node index
  const std::vector<std::string> machines = all_gather_strings(comm, me.dump());
  if (comm.rank() != 0) return;
  const RunSummary s = summarize_metrics(metrics_path, plan.total_batch_size);
  print_line_if(true, run_summary_line(s));
  const bool sft = plan.command == "chat-sft";
  nlohmann::ordered_json d;
  d["model_tag"] = plan.tag;
  d["checkpoint_dir"] = plan.checkpoint_dir;
  d["depth"] = plan.model.n_layer;
  d["parameters"] = count_params(plan.model).total;
  d["max_seq_len"] = plan.T;
  d["total_batch_size"] = plan.total_batch_size;
  d["world_size"] = plan.world_size;
  d["threads_per_rank"] = num_threads();
  d["steps"] = s.steps;
  d["last_step"] = st.step;
  d["tokens"] = s.tokens;
  d["tok_per_sec"] = std::llround(s.tok_per_sec);
  d["mfu_percent"] = std::round(s.mfu * 100.0) / 100.0;
  d["training_time_s"] = st.total_training_time;
  if (s.final_val_bpb) d["val_bpb"] = *s.final_val_bpb;
  if (std::isfinite(st.min_val_bpb)) d["min_val_bpb"] = st.min_val_bpb;
  if (!s.rank_share.empty()) d["rank_share"] = s.rank_share;
  d["nodes"] = nodes_of(machines, s.rank_share);
  log_report_section(sft ? "chat-sft" : "base-model-training", sft ? "Chat SFT" : "Base model training", d);
}

}  // namespace nanochat
