// `nanochat speedrun`: the whole road in one command (road/stages.h), with a plan and ETA before
// it starts (road/estimate.h), a line of the road's progress while it runs, the same command
// again skipping what is done and continuing an interrupted training stage (road/ledger.h), and
// the report card at the end (road/card.h). `nanochat report` writes the card of stages run by hand.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/cli/commands.h"
#include "nanochat/cli/road_folders.h"
#include "nanochat/cli/road_job.h"
#include "nanochat/cli/stage_process.h"
#include "nanochat/cli/suggest.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/report_log.h"
#include "nanochat/core/timer.h"
#include "nanochat/road/card.h"
#include "nanochat/road/estimate.h"
#include "nanochat/road/ledger.h"
#include "nanochat/road/stages.h"

namespace nanochat::cli {

namespace fs = std::filesystem;
using road::Stage;

namespace {

struct SpeedrunArgs {
  std::string preset = "tiny";
  bool offline = false;
  std::string rl;  // "", on, off
  std::string model_tag;
  bool plan_only = false;
  double hours = 0;  // > 0: pick the depth that fits
  bool replace_tokenizer = false;
};

// --preset and --hours, named with what to give instead.
void check_args(const SpeedrunArgs& a) {
  const auto names = road::preset_names();
  if (std::find(names.begin(), names.end(), a.preset) == names.end()) {
    const std::string best = closest_name(a.preset, names);
    fail("speedrun --preset ", a.preset, ": not a preset", best.empty() ? "" : "; did you mean '" + best + "'?",
         " (presets: tiny, runcpu)");
  }
  if (a.hours < 0 || !std::isfinite(a.hours))
    fail("speedrun --hours ", a.hours, ": give the hours the road may take, a positive number (e.g. 0.5 or 4)");
}

// "19:42:05" today, "Tue 07:13" on a later day.
std::string clock_at(double seconds_from_now) {
  const std::time_t now = std::time(nullptr);
  const std::time_t t = now + static_cast<std::time_t>(std::llround(seconds_from_now));
  std::tm tm{}, today{};
  localtime_r(&t, &tm);
  localtime_r(&now, &today);
  char b[32];
  std::strftime(b, sizeof b, tm.tm_yday == today.tm_yday && tm.tm_year == today.tm_year ? "%H:%M:%S" : "%a %H:%M", &tm);
  return b;
}

std::string shell_line(const std::vector<std::string>& c) {
  std::string s;
  for (const auto& w : c) {
    const bool quote = w.empty() || w.find_first_of(" |'\"$*?") != std::string::npos;
    s += (s.empty() ? "" : " ") + (quote ? "'" + w + "'" : w);
  }
  return s;
}

// The road's own flags come first; --<command>.<flag> [VALUE] (CLI11 leaves them to us) are
// checked against that command's flags.
std::vector<road::FlagOverride> parse_overrides(const CLI::App& top, const std::vector<std::string>& rest) {
  std::vector<road::FlagOverride> out;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& w = rest[i];
    bool takes_value = false;
    const std::string bad = check_stage_flag(top, w, takes_value);
    if (!bad.empty()) fail(bad);
    const size_t eq = w.find('='), dot = w.find('.');
    road::FlagOverride ov;
    ov.command = w.substr(2, dot - 2);
    const std::string flag = "--" + w.substr(dot + 1, (eq == std::string::npos ? w.size() : eq) - dot - 1);
    const auto subs = top.get_subcommands([&](const CLI::App* a) { return a->get_name() == ov.command; });
    const CLI::App* sub = subs.front();
    const CLI::Option* opt = sub->get_option_no_throw(flag);
    for (const auto& l : opt->get_lnames()) ov.names.push_back("--" + l);
    for (const auto& s : opt->get_snames()) ov.names.push_back("-" + s);
    std::stable_partition(ov.names.begin(), ov.names.end(), [&](const std::string& n) { return n == flag; });
    if (std::find(ov.names.begin(), ov.names.end(), "--model-tag") != ov.names.end())
      fail("speedrun: ", w,
           " would give one stage another model than the others; name the road's model with "
           "speedrun --model-tag ",
           eq == std::string::npos && i + 1 < rest.size() ? rest[i + 1] : "TAG");
    ov.takes_value = takes_value;
    if (eq != std::string::npos)
      ov.value = w.substr(eq + 1);
    else if (takes_value) {
      if (i + 1 >= rest.size()) fail("speedrun: ", w, " needs a value (", w, " VALUE or ", w, "=VALUE)");
      ov.value = rest[++i];
    }
    out.push_back(ov);
  }
  return out;
}

bool has_shards(const std::string& dir) {
  std::error_code ec;
  int n = 0;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".parquet") ++n;
  return n >= 2;
}

// How far a stage's command is (0..1) from one of its log lines, or -1.
double progress_of(const std::string& line) {
  // a job's launcher prefixes its ranks' lines with "[rank R] "
  static const std::regex train(R"(^(?:\[rank \d+\] )?step (\d+)/(\d+) \()"),
      sft(R"(^(?:\[rank \d+\] )?step \d+ \(([\d.]+)%\))"), rl(R"(^Step (\d+)/(\d+) \|)"),
      split(R"(^(train|val): \d+/\d+ batches \((\d+)%\))");
  std::smatch m;
  if (std::regex_search(line, m, train)) return std::stod(m[1]) / std::max(1.0, std::stod(m[2]));
  if (std::regex_search(line, m, sft)) return std::stod(m[1]) / 100.0;
  if (std::regex_search(line, m, rl)) return (std::stod(m[1]) + 1) / std::max(1.0, std::stod(m[2]));
  if (std::regex_search(line, m, split)) return (m[1] == "val" ? 0.5 : 0.0) + std::stod(m[2]) / 200.0;
  return -1;
}

void write_card(const std::string& base, const nlohmann::json& ledger) {
  const std::string dir = report_dir();
  const std::string md = road::render_card(dir, ledger, {road::this_node()}, base);
  write_file_atomic(dir + "/report.md", md);
  std::printf("Report card: %s/report.md\n", dir.c_str());
  try {
    write_file_atomic("report.md", md);
    std::printf("  (a copy: %s/report.md)\n", fs::current_path().string().c_str());
  } catch (const Error& e) {
    std::printf("  (no copy in the working folder: %s)\n", e.what());
  }
}

struct RoadRun {
  const SpeedrunArgs& a;
  std::string base, tag;
  std::vector<Stage> stages;
  std::map<std::string, double> planned;
  road::Ledger ledger;
  std::vector<std::string> job_flags;  ///< node 0 of a road job: `nanochat run`'s flags (cli/road_job.h); empty: alone
  road::JobSpeed job;                  ///< the job's training speed (measure_job); a node alone: none
};

void print_plan(const RoadRun& r, const road::SpeedProbe& p, const road::TrainSize& z) {
  const road::NodeInfo n = road::this_node();
  std::printf("speedrun plan: preset %s, %s; %s (%d cores, %d threads, %s, %.1f GiB)\n", r.a.preset.c_str(),
              r.a.offline ? "offline (demo corpus, offline chat tasks)" : "online (nanochat's shards and datasets)",
              n.cpu.c_str(), n.cores, n.logical, n.isa.c_str(), n.memory_gib);
  std::printf(
      "  model %s: depth %d, %s parameters; base-train %s steps x %s tokens = %s tokens at %s tok/s "
      "(measured now: %.2f s per %d x %d micro-batch, optimizer %.2f s)\n",
      r.tag.c_str(), z.depth, with_commas(z.params).c_str(), with_commas(z.steps).c_str(),
      with_commas(z.total_batch).c_str(), with_commas(z.steps * z.total_batch).c_str(),
      with_commas(static_cast<int64_t>(p.train_tok_per_s(z.total_batch))).c_str(), p.micro_batch_s, p.B, p.T,
      p.optimizer_s);
  if (r.job.speedup != 1 || r.job.launch_s > 0)
    std::printf(
        "  as a job: base-train and chat-sft at %s tok/s (the nodes measured together; chat-rl's rollouts as "
        "much faster), %.3f s a step exchanging the model, %.1f s a launch\n",
        with_commas(static_cast<int64_t>(p.train_tok_per_s(z.total_batch) * r.job.speedup)).c_str(),
        r.job.exchange_s_per_param * static_cast<double>(p.params), r.job.launch_s);
  double at = 0;
  bool ran_one = false;  // a stage that runs makes every later one run
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const Stage& s = r.stages[i];
    const bool done = !ran_one && r.ledger.why_run(s, r.base).empty();
    ran_one = ran_one || !done;
    const double t = done ? 0.0 : r.planned.at(s.id);
    at += t;
    std::printf("  [%zu/%zu] %-14s %9s  ends %s%s\n", i + 1, r.stages.size(), s.id.c_str(),
                done ? "done" : road::duration_text(t).c_str(), clock_at(at).c_str(), done ? " (skipped: done)" : "");
    for (const auto& c : s.commands) std::printf("        %s\n", shell_line(c).c_str());
  }
  std::printf("  finish: %s (%s from now)\n", clock_at(at).c_str(), road::duration_text(at).c_str());
  if (at > 8 * 3600.0 && r.a.hours <= 0)
    std::printf("  (a shorter road: --hours H picks the deepest model whose road fits H hours)\n");
  std::fflush(stdout);
}

// The base folder's tokenizer is not this road's and no --replace-tokenizer (cli/road_folders.h).
bool foreign_tokenizer(const RoadRun& r) { return cli::foreign_tokenizer(r.base, r.ledger, r.a.replace_tokenizer); }

int run_stage(RoadRun& r, size_t i, double road_left_after, bool resume) {
  const Stage& s = r.stages[i];
  prepare_tokenizer(r.base, s, foreign_tokenizer(r));
  std::vector<std::string> extra = prepare_training(r.base, s, resume);
  r.ledger.started(s, !extra.empty());
  fs::create_directories(r.base + "/report/logs");
  const std::string log = r.base + "/report/logs/" + s.id + ".log";
  Timer timer;
  double last_line = 0;
  const double plan = r.planned.at(s.id);
  for (size_t k = 0; k < s.commands.size(); ++k) {
    std::vector<std::string> c = s.commands[k];
    std::string program = self_executable();
    if (c[0] == "!bash") {
      program = "/bin/bash";
      c.erase(c.begin());
      c.push_back("--bin");
      c.push_back(self_executable());
    } else
      c.insert(c.end(), extra.begin(), extra.end());
    const bool on_every_node = !r.job_flags.empty() && distributed_stage_command(c);
    if (on_every_node) {
      bool last = k + 1 == s.commands.size();  // no distributed stage after it: the followers end after it
      for (size_t later = i + 1; later < r.stages.size(); ++later)
        for (const auto& lc : r.stages[later].commands) last = last && !distributed_stage_command(lc);
      c = job_stage_command(r.job_flags, s.id, c, last);
    }
    if (const std::string out = road::flag_value(c, "-o"); !out.empty())
      fs::create_directories(fs::path(out).parent_path());  // the offline chat tasks' folder
    std::printf("speedrun: [%zu/%zu] %s: %s\n", i + 1, r.stages.size(), s.id.c_str(), shell_line(c).c_str());
    auto on_line = [&](const std::string& line) {
      const double f = progress_of(line);
      const double el = timer.seconds();
      if (f <= 0 || el - last_line < 15.0) return;
      last_line = el;
      r.ledger.progress(s.id, el);
      const double left = (f > 0.05 ? el * (1 - f) / f : std::max(0.0, plan - el)) + road_left_after;
      std::printf("speedrun: [%zu/%zu] %s %.0f%% | road ETA %s (%s left)\n", i + 1, r.stages.size(), s.id.c_str(),
                  100.0 * f, clock_at(left).c_str(), road::duration_text(left).c_str());
    };
    const int rc = run_stage_process(program, c, log, on_line);
    if (const int sig = stop_signal(); sig != 0) {
      std::printf(
          "speedrun: stopped by %s during [%zu/%zu] %s. Run the same command to continue: the finished "
          "stages are skipped%s.\n",
          sig == SIGINT    ? "SIGINT"
          : sig == SIGTERM ? "SIGTERM"
                           : "SIGHUP",
          i + 1, r.stages.size(), s.id.c_str(),
          s.checkpoint_dir.empty() ? "" : " and this one continues from its last checkpoint");
      return 128 + sig;
    }
    if (rc != 0) {
      std::printf(
          "speedrun: [%zu/%zu] %s failed (exit status %d; its log: %s). Fix what it says and run the same "
          "command again: the finished stages are skipped%s.\n",
          i + 1, r.stages.size(), s.id.c_str(), rc, log.c_str(),
          s.checkpoint_dir.empty() ? "" : " and this one continues from its last checkpoint");
      return rc;
    }
  }
  const double took = timer.seconds();  // the card's figure is the printed one
  r.ledger.finished(s, took, r.base);
  std::printf("speedrun: [%zu/%zu] %s done in %s (planned %s)\n", i + 1, r.stages.size(), s.id.c_str(),
              road::duration_text(took).c_str(), road::duration_text(plan).c_str());
  return 0;
}

const std::vector<std::string>& base_train_of(const std::vector<Stage>& stages) {
  for (const Stage& s : stages)
    if (s.id == "base-train") return s.commands.front();
  fail("speedrun: the road has no base-train stage");
}

// --hours: the deepest model whose road fits (road/estimate.h choose_depth); the same command
// again keeps the depth it chose (the ledger), so that a rerun continues the same road.
road::SpeedProbe choose_depth_for_hours(const SpeedrunArgs& a, const road::RoadOptions& o, RoadRun& r,
                                        const road::SpeedProbe& p, bool data_ready, int vocab) {
  for (const auto& ov : o.overrides)
    if (ov.command == "base-train" && (ov.names.front() == "--depth" || ov.names.front() == "--num-iterations"))
      fail("speedrun --hours picks base-train's depth and steps; drop ", ov.names.front(), " (--base-train.",
           ov.names.front().substr(2), ") or --hours");
  auto road_for = [&](int depth) {
    road::RoadOptions od = o;
    od.overrides.push_back({"base-train", {"--depth"}, std::to_string(depth), true});
    od.overrides.push_back({"base-train", {"--num-iterations"}, "-1", true});
    std::vector<Stage> first = road::plan_road(od);
    int64_t steps = 0;
    for (const Stage& s : first)
      if (s.id == "base-train") steps = road::base_train_size(s.commands.front(), vocab).steps;
    od.overrides = o.overrides;
    for (const auto& d : road::depth_overrides(depth, steps)) od.overrides.push_back(d);
    return road::plan_road(od);
  };
  const nlohmann::json& rd = r.ledger.road();
  int depth = 0;
  if (rd.is_object() && rd.value("hours", 0.0) == a.hours && rd.value("preset", "") == a.preset &&
      rd.value("depth", 0) > 0) {
    depth = rd["depth"].get<int>();
    std::printf("speedrun: --hours %g: depth %d, as chosen when this road started\n", a.hours, depth);
  } else {
    const std::vector<std::string> probed = [&] {
      for (const Stage& s : r.stages)
        if (s.id == "base-train") return s.commands.front();
      return std::vector<std::string>{};
    }();
    const road::DepthChoice c = road::choose_depth(a.hours * 3600.0, p, probed, road_for, data_ready, r.job);
    std::string tried;
    for (const auto& [d, t] : c.tried)
      tried += str_cat(tried.empty() ? "" : ", ", "d", d, " (width ",
                       road::base_train_size(base_train_of(road_for(d)), vocab).width, ") ", road::duration_text(t));
    if (c.depth == 0)
      fail("speedrun --hours ", a.hours, ": even the smallest model's road takes longer (", tried,
           "); give more hours, or fewer tokens per parameter (--base-train.target-param-data-ratio, nanochat's 12)");
    depth = c.depth;
    std::printf("speedrun: --hours %g: the roads looked at, from this machine's speed on depth %d: %s\n", a.hours,
                p.depth, tried.c_str());
  }
  // the chosen model's own speed; one depth less while its road, so measured, is over the budget
  road::SpeedProbe own;
  double total = 0;
  for (;;) {
    r.stages = road_for(depth);
    own = road::probe_speed(base_train_of(r.stages), vocab);
    total = 0;
    for (const auto& [id, t] : road::estimate_stages(r.stages, own, data_ready, r.job)) total += t;
    if (total <= a.hours * 3600.0 || depth <= 2) break;
    std::printf("speedrun: --hours %g: depth %d's road, measured on its own model, takes %s; one depth less\n", a.hours,
                depth, road::duration_text(total).c_str());
    --depth;
  }
  if (!r.job_flags.empty()) {  // the nodes together on the chosen model (their speed-up differs by depth)
    r.job = measure_job(r.job_flags, base_train_of(r.stages), vocab, own, a.plan_only, report_dir());
    total = 0;
    for (const auto& [id, t] : road::estimate_stages(r.stages, own, data_ready, r.job)) total += t;
  }
  std::printf("speedrun: --hours %g: depth %d fits (its road %s of %s)\n", a.hours, depth,
              road::duration_text(total).c_str(), road::duration_text(a.hours * 3600.0).c_str());
  r.ledger.road()["hours"] = a.hours;
  r.ledger.road()["depth"] = depth;
  return own;
}

// Every stage finished with these commands and its outputs unchanged.
bool all_done(const RoadRun& r) {
  for (const Stage& s : r.stages)
    if (!r.ledger.why_run(s, r.base).empty()) return false;
  return r.ledger.all().contains("plan");
}

// The road's options from the flags; offline without shards, the demo corpus script must be there.
road::RoadOptions road_options(const SpeedrunArgs& a, const CLI::App& top, const std::vector<std::string>& rest,
                               bool data_ready) {
  road::RoadOptions o;
  o.preset = a.preset;
  o.offline = a.offline;
  if (a.rl == "on") o.rl = true;
  if (a.rl == "off") o.rl = false;
  o.model_tag = a.model_tag;
  o.base_dir = base_dir();
  o.data_dir = data_dir();
  o.overrides = parse_overrides(top, rest);
  o.eval_bundle_present = fs::exists(o.base_dir + "/eval_bundle/core.yaml");
  if (a.offline && !data_ready) {
    const fs::path script = fs::path(self_executable()).parent_path().parent_path() / "scripts" / "demo_corpus.sh";
    std::error_code ec;
    if (!fs::exists(script, ec))
      fail("speedrun --offline: ", o.data_dir, " has no parquet shards and ", script.string(),
           " (which builds the demo corpus) is not there; run scripts/demo_corpus.sh from the source tree, or pack "
           "your own text with `nanochat data pack FILES --out ",
           o.data_dir, "`");
    o.demo_corpus_script = script.string();
  }
  return o;
}

// A training stage the walk will continue from its checkpoint at step S of N plans its last
// N - S steps only.
void plan_resumed_part(RoadRun& r, int vocab) {
  for (const Stage& s : r.stages) {
    if (!r.ledger.why_run(s, r.base).empty() && !r.ledger.interrupted(s)) return;  // it, and all after it, run afresh
    if (!r.ledger.interrupted(s) || s.checkpoint_dir.empty()) continue;
    const auto last = last_complete_step(r.base + "/" + s.checkpoint_dir);
    const std::vector<std::string>& c = s.commands.front();
    int64_t steps = 0;
    if (c[0] == "base-train")
      steps = road::base_train_size(c, vocab).steps;
    else if (c[0] == "chat-sft" && !road::flag_value(c, "--num-iterations").empty())
      steps = std::stoll(road::flag_value(c, "--num-iterations")) - 1;  // nanochat trains N - 1 steps
    else if (c[0] == "chat-rl" && !road::flag_value(c, "--num-steps").empty())
      steps = std::stoll(road::flag_value(c, "--num-steps")) - 1;  // checkpoint S holds the weights after step S
    if (last && steps > 0 && *last < steps)
      r.planned[s.id] *= static_cast<double>(steps - *last) / static_cast<double>(steps);
    return;  // the stages after it run afresh
  }
}

// This machine's speed on the road's model (the depth --hours picks), each stage's time, printed.
void plan_here(const SpeedrunArgs& a, const road::RoadOptions& o, RoadRun& r, bool data_ready) {
  const int vocab = road::road_vocab_size(r.stages);
  std::printf("speedrun: measuring this machine's speed on the road's model (depth %d)...\n",
              road::base_train_size(base_train_of(r.stages), vocab).depth);
  std::fflush(stdout);
  road::SpeedProbe p = road::probe_speed(base_train_of(r.stages), vocab);
  if (!r.job_flags.empty())
    r.job = measure_job(r.job_flags, base_train_of(r.stages), vocab, p, a.plan_only && a.hours <= 0, report_dir());
  if (a.hours > 0) p = choose_depth_for_hours(a, o, r, p, data_ready, vocab);
  r.tag = road::road_model_tag(r.stages, o);
  r.planned = road::estimate_stages(r.stages, p, data_ready, r.job);
  plan_resumed_part(r, vocab);
  print_plan(r, p, road::base_train_size(base_train_of(r.stages), vocab));
}

// The ledger's record of the road (what the card shows of it) and of the plan.
void record_road(const SpeedrunArgs& a, RoadRun& r, const std::string& command_line) {
  nlohmann::json& rd = r.ledger.road();
  if (!rd.is_object() || rd.value("preset", "") != a.preset || !rd.contains("started")) {
    const nlohmann::json keep = rd;
    rd = nlohmann::json::object();
    rd["started"] = local_timestamp();
    for (const char* k : {"hours", "depth"})
      if (keep.is_object() && keep.contains(k)) rd[k] = keep[k];
  }
  if (a.hours <= 0) rd.erase("hours"), rd.erase("depth");
  rd["preset"] = a.preset;
  rd["offline"] = a.offline;
  rd["model_tag"] = r.tag;
  rd["command"] = command_line;
  rd["order"] = nlohmann::json::array();
  for (const Stage& s : r.stages) rd["order"].push_back({{"id", s.id}, {"title", s.title}, {"section", s.section}});
  for (const auto& [id, t] : r.planned) r.ledger.plan()["stages"][id]["seconds"] = t;
  r.ledger.save();
}

// The stages in order: a done one is skipped until one runs; from there every one runs.
int walk_road(RoadRun& r) {
  bool ran_one = false;
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const Stage& s = r.stages[i];
    const std::string why = r.ledger.why_run(s, r.base);
    if (why.empty() && !ran_one) {
      std::printf("speedrun: [%zu/%zu] %s: done already (%s), skipped\n", i + 1, r.stages.size(), s.id.c_str(),
                  r.ledger.stage(s.id).value("finished", std::string("?")).c_str());
      continue;
    }
    const bool resume = !ran_one && r.ledger.interrupted(s);
    std::printf("speedrun: [%zu/%zu] %s runs: %s\n", i + 1, r.stages.size(), s.id.c_str(),
                ran_one && why.empty() ? "a stage before it ran again" : why.c_str());
    double after = 0;
    for (size_t k = i + 1; k < r.stages.size(); ++k) after += r.planned.at(r.stages[k].id);
    ran_one = true;
    if (const int rc = run_stage(r, i, after, resume); rc != 0) return rc;
  }
  return 0;
}

// The end: the time taken against the plan, the card, how to talk to the model.
void finish_road(const SpeedrunArgs& a, const RoadRun& r) {
  double total = 0, planned = 0;
  for (const Stage& s : r.stages) {
    total += r.ledger.stage(s.id).value("seconds", 0.0);
    planned += r.planned.at(s.id);
  }
  std::printf("\nspeedrun: the road is done: %s of stages (planned %s)\n", road::duration_text(total).c_str(),
              road::duration_text(planned).c_str());
  write_card(r.base, r.ledger.all());
  const bool rl = std::any_of(r.stages.begin(), r.stages.end(), [](const Stage& s) { return s.id == "chat-rl"; });
  const std::string src = rl ? "rl" : "sft";
  const std::string bin = self_executable();
  std::printf(
      "Talk to the model (NANOCHAT_BASE_DIR=%s):\n  %s chat -i %s -g %s -p \"%s\"\n  %s chat-web -i %s -g %s   "
      "(then open http://127.0.0.1:8000/)\n",
      r.base.c_str(), bin.c_str(), src.c_str(), r.tag.c_str(),
      a.offline ? "What is 12 plus 7?" : "What is the capital of France?", bin.c_str(), src.c_str(), r.tag.c_str());
}

int run_speedrun(const SpeedrunArgs& a, const CLI::App& top, const std::vector<std::string>& rest,
                 const std::string& command_line) {
  check_args(a);
  const bool data_ready = has_shards(data_dir());
  const road::RoadOptions o = road_options(a, top, rest, data_ready);
  RoadRun r{
      a, o.base_dir, "", road::plan_road(o), {}, road::Ledger(report_dir() + "/speedrun.json"), road_job_run_flags(),
      {}};
  if (!r.job_flags.empty())
    std::printf(
        "speedrun: node 0 of a job (nanochat run %s): base-train, chat-sft and chat-rl run on every node that follows "
        "(the same command with its --node-rank); the rest runs here. The plan measures this node, then the nodes "
        "there together\n",
        shell_line(r.job_flags).c_str());
  // tok-train's check says why the road stops, before anything runs; a plan alone changes nothing,
  // so it only notes it
  if (foreign_tokenizer(r) && a.plan_only)
    std::printf(
        "speedrun: NOTE: %s/tokenizer holds a tokenizer this road did not make: to run this road, use "
        "another base folder (NANOCHAT_BASE_DIR=%s-speedrun) or pass --replace-tokenizer\n",
        r.base.c_str(), r.base.c_str());
  else
    for (const Stage& s : r.stages)
      if (foreign_tokenizer(r)) prepare_tokenizer(r.base, s, true);
  if (all_done(r)) {
    r.tag = road::road_model_tag(r.stages, o);
    for (const Stage& s : r.stages)
      r.planned[s.id] = r.ledger.all()["plan"]["stages"].value(s.id, nlohmann::json::object()).value("seconds", 0.0);
    std::printf("speedrun: every stage of this road is done (report/speedrun.json); nothing to run\n");
    if (!a.plan_only) finish_road(a, r);
    return 0;
  }
  plan_here(a, o, r, data_ready);
  if (a.plan_only) return 0;
  // a job's card names its `nanochat run` too
  record_road(
      a, r,
      r.job_flags.empty() ? command_line : "nanochat run " + shell_line(r.job_flags) + " " + command_line.substr(9));
  if (const int rc = walk_road(r); rc != 0) return rc;
  finish_road(a, r);
  return 0;
}

}  // namespace

void register_speedrun(CLI::App& app) {
  auto a = std::make_shared<SpeedrunArgs>();
  CLI::App* c = app.add_subcommand(
      "speedrun",
      "the whole road in one command: data, tokenizer, base-train, base-eval, chat-sft, chat-eval (and chat-rl), "
      "with a plan and ETA first and a report card at the end; the same command again continues where it stopped");
  c->allow_extras();
  c->add_option("--preset", a->preset, "tiny (a few minutes on 2 cores) or runcpu (nanochat's runs/runcpu.sh)")
      ->capture_default_str();
  c->add_flag("--offline", a->offline,
              "the demo corpus and the offline chat tasks (SpellingBee, Arithmetic, Identity); CORE only where "
              "$NANOCHAT_BASE_DIR/eval_bundle is already there");
  c->add_option("--rl", a->rl, "on|off: chat-rl and its evaluation (default: tiny on, runcpu off, as runcpu.sh)")
      ->check(CLI::IsMember({"on", "off"}));
  c->add_option("--model-tag", a->model_tag, "the checkpoints' tag (default d<depth>)");
  c->add_flag("--plan-only", a->plan_only, "measure this machine, print the plan and its ETA, run nothing");
  c->add_flag("--replace-tokenizer", a->replace_tokenizer,
              "let tok-train replace a tokenizer of the base folder that this road did not make (it is kept in "
              "tokenizer.before-<time>; the models trained with it need it back)");
  c->add_option("--hours", a->hours,
                "a time budget: measure this machine, pick the deepest model whose whole road fits (base-train at "
                "nanochat's tokens-to-parameters ratio) and plan it");
  c->footer(
      "Any stage's flag: --<command>.<flag> VALUE, e.g. --base-train.depth 8 --chat-sft.num-iterations 200 "
      "(every stage running that command). Its card: $NANOCHAT_BASE_DIR/report/report.md.");
  const CLI::App* top = &app;
  c->callback([a, c, top] {
    std::string line = "nanochat speedrun --preset " + a->preset + (a->offline ? " --offline" : "") +
                       (a->rl.empty() ? "" : " --rl " + a->rl) +
                       (a->model_tag.empty() ? "" : " --model-tag " + a->model_tag) +
                       (a->hours > 0 ? str_cat(" --hours ", a->hours) : "");
    for (const auto& w : c->remaining()) line += " " + w;
    const int rc = run_speedrun(*a, *top, c->remaining(), line);
    if (rc != 0) std::exit(rc);
  });
}

void register_report(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "report",
      "write the report card ($NANOCHAT_BASE_DIR/report/report.md and ./report.md) from what the stages "
      "recorded (nanochat's former report generate)");
  c->callback([] {
    const std::string base = base_dir();
    const road::Ledger ledger(report_dir() + "/speedrun.json");
    write_card(base, ledger.all().contains("road") ? ledger.all() : nlohmann::json());
  });
}

}  // namespace nanochat::cli
