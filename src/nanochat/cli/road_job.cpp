#include "nanochat/cli/road_job.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "nanochat/cli/stage_process.h"
#include "nanochat/cluster/env.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/timer.h"
#include "nanochat/road/card.h"
#include "nanochat/road/estimate.h"

namespace nanochat::cli {

std::string RoadStageNote::to_json() const {
  return nlohmann::json{{"id", id}, {"stage", stage}, {"args", args}, {"last", last}}.dump();
}

RoadStageNote RoadStageNote::parse(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    RoadStageNote n;
    n.id = j.at("id").get<std::string>();
    n.stage = j.at("stage").get<std::string>();
    n.args = j.at("args").get<std::vector<std::string>>();
    n.last = j.at("last").get<bool>();
    if (n.args.empty()) fail("no command");
    return n;
  } catch (const std::exception& e) {
    fail("node 0 published a stage this node cannot read (", e.what(),
         "): node 0 runs another build of nanochat; use the same one on every node");
  }
}

namespace {

std::string words_line(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

}  // namespace

bool distributed_stage_command(const std::vector<std::string>& c) {
  return !c.empty() && (c[0] == "base-train" || c[0] == "chat-sft" || c[0] == "chat-rl");
}

std::vector<std::string> road_job_run_flags() {
  const char* v = std::getenv(kRoadJobEnv);
  if (!v || !*v) return {};
  try {
    return nlohmann::json::parse(v).at("run").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    fail(kRoadJobEnv, " is not what `nanochat run ... speedrun` sets (", e.what(), "); unset it");
  }
}

void lead_road_job(const std::vector<std::string>& run_flags, const std::vector<std::string>& speedrun_args) {
  ::setenv(kRoadJobEnv, nlohmann::json{{"run", run_flags}}.dump().c_str(), 1);
  const std::string self = self_executable();
  std::vector<std::string> words{self};
  words.insert(words.end(), speedrun_args.begin(), speedrun_args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(self.c_str(), argv.data());
  fail("could not start ", self, " speedrun: ", std::strerror(errno));
}

std::vector<std::string> job_stage_command(const std::vector<std::string>& run_flags, const std::string& stage,
                                           const std::vector<std::string>& c, bool last) {
  RoadStageNote n;
  n.id = str_cat(stage, "@", static_cast<long long>(std::time(nullptr)), ".", ::getpid());
  n.stage = stage;
  n.args = c;
  n.last = last;
  std::vector<std::string> w{"run"};
  w.insert(w.end(), run_flags.begin(), run_flags.end());
  w.insert(w.end(), {"--publish", n.to_json()});
  w.insert(w.end(), c.begin(), c.end());
  return w;
}

road::JobSpeed measure_job(const std::vector<std::string>& run_flags, const std::vector<std::string>& base_train,
                           int vocab, const road::SpeedProbe& alone, bool last, const std::string& report_dir) {
  const std::string out = report_dir + "/probe.json", log = report_dir + "/logs/speed-probe.log";
  std::filesystem::create_directories(report_dir + "/logs");
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::vector<std::string> c{"road-probe", "--vocab", std::to_string(vocab), "--out", out};
  c.insert(c.end(), base_train.begin(), base_train.end());
  c = job_stage_command(run_flags, "speed-probe", c, last);
  std::printf("speedrun: measuring the job's nodes together on the road's model: nanochat %s\n", words_line(c).c_str());
  std::fflush(stdout);
  Timer t;
  const int rc = run_stage_process(self_executable(), c, log, nullptr);
  const double took = t.seconds();
  std::vector<road::SpeedProbe> ranks;
  double exchange = 0, measuring = 0;  // the slowest rank's all-reduce; its seconds of measuring
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(out));
    for (const auto& x : j.at("ranks")) {
      road::SpeedProbe q = alone;
      q.micro_batch_s = x.at("micro_batch_s").get<double>();
      q.optimizer_s = x.at("optimizer_s").get<double>();
      q.B = x.at("B").get<int>();
      q.T = x.at("T").get<int>();
      exchange = std::max(exchange, x.at("exchange_s").get<double>());
      measuring = std::max(measuring, x.at("probe_s").get<double>());
      ranks.push_back(q);
    }
  } catch (const std::exception& e) {
    std::printf(
        "speedrun: the job's nodes could not be measured together (exit status %d, %s; its log: %s): the "
        "plan is this node's speed alone\n",
        rc, e.what(), log.c_str());
    return {};
  }
  // a launch's own cost (the nodes' rendezvous, the ranks' start): its time less the measuring
  const road::JobSpeed j = road::job_speed(alone, ranks, exchange, road::base_train_size(base_train, vocab).total_batch,
                                           std::max(0.0, took - measuring));
  std::printf(
      "speedrun: %zu ranks measured together in %s: the training stages run %.2fx this node alone, plus "
      "%.3f s a step exchanging the model and %.1f s a launch\n",
      ranks.size(), road::duration_text(took).c_str(), j.speedup,
      j.exchange_s_per_param * static_cast<double>(alone.params), j.launch_s);
  std::fflush(stdout);
  return j;
}

void register_road_probe(CLI::App& app) {
  struct Args {
    int vocab = 32768;
    std::string out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("road-probe", "speedrun's measure of a job's nodes (cli/road_job.h)");
  c->group("");         // hidden: node 0's speedrun launches it on the job's nodes
  c->prefix_command();  // the base-train command line follows
  c->add_option("--vocab", a->vocab, "the road's vocabulary size")->required();
  c->add_option("--out", a->out, "rank 0 writes the ranks' figures here")->required();
  c->callback([a, c] {
    if (const char* j = std::getenv("NANOCHAT_JOIN"); j && std::string(j) == "1") {
      std::printf(
          "road-probe: this node arrived after node 0's speed probe started; it takes part in the next "
          "stage\n");
      return;
    }
    const std::vector<std::string> base_train = c->remaining();
    std::unique_ptr<Communicator> comm = cluster::make_communicator_from_env();
    Timer probing;
    const road::SpeedProbe p = road::probe_speed(base_train, a->vocab);
    // a ZeRO-2 step moves about the model's size each way: timed as an all-reduce of it (the best of 3)
    std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(1, p.params)), 1.0f);
    double exchange = 1e30;
    for (int k = 0; k < 3; ++k) {
      Timer t;
      comm->all_reduce_sum(buf.data(), buf.size())->wait();
      exchange = std::min(exchange, t.seconds());
    }
    const nlohmann::json me = {{"micro_batch_s", p.micro_batch_s},
                               {"optimizer_s", p.optimizer_s},
                               {"forward_s", p.forward_s},
                               {"B", p.B},
                               {"T", p.T},
                               {"params", p.params},
                               {"exchange_s", comm->world_size() > 1 ? exchange : 0.0},
                               {"probe_s", probing.seconds()},
                               {"node", cluster::env_int("GROUP_RANK").value_or(0)}};
    const std::vector<std::string> all = all_gather_strings(*comm, me.dump());
    if (comm->rank() != 0) return;
    nlohmann::json ranks = nlohmann::json::array();
    for (const std::string& s : all) ranks.push_back(nlohmann::json::parse(s));
    write_file_atomic(a->out, nlohmann::json{{"ranks", ranks}}.dump(1));
  });
}

int follow_road_job(cluster::LaunchOptions L, cluster::Ms wait) {
  const std::string tag = str_cat("speedrun (node ", L.node_rank, "): ");
  std::printf(
      "%sfollowing node 0's road at %s:%d: this node takes part in its distributed stages (base-train, "
      "chat-sft, chat-rl) and waits for each (at most %s); node 0 runs the rest and writes the card\n",
      tag.c_str(), L.master_addr.c_str(), L.master_port,
      road::duration_text(static_cast<double>(wait.count()) / 1000.0).c_str());
  std::fflush(stdout);
  L.rendezvous_timeout = wait;
  std::string last_id;
  for (int stages = 0;;) {
    std::optional<RoadStageNote> taken;
    std::string said_for;  // the launch it said it waits after, once
    L.follow = [&](const std::string& published) -> std::optional<std::vector<std::string>> {
      RoadStageNote n = RoadStageNote::parse(published);
      if (n.id == last_id) {
        if (said_for != n.id)
          std::printf("%snode 0's %s is the stage this node ran; waiting for its next one\n", tag.c_str(),
                      n.stage.c_str());
        said_for = n.id;
        std::fflush(stdout);
        return std::nullopt;
      }
      std::printf("%stakes part in node 0's %s (node 0 reads the files it names): %s\n", tag.c_str(), n.stage.c_str(),
                  words_line(n.args).c_str());
      std::fflush(stdout);
      taken = n;
      return n.args;
    };
    int rc = 0;
    try {
      rc = cluster::launch(L);
    } catch (const Error& e) {
      if (!taken) throw;  // it never reached a stage: the job's set-up is wrong (the message says how)
      std::printf("%s%s ended on this node with an error: %s\n", tag.c_str(), taken->stage.c_str(), e.what());
      if (taken->last) return 1;
      std::printf("%swaiting for node 0's next stage\n", tag.c_str());
      std::fflush(stdout);
      last_id = taken->id;
      continue;
    }
    if (rc != 0) return rc;  // interrupted (its launcher said by what)
    last_id = taken->id;
    ++stages;
    std::printf("%s%s done on this node\n", tag.c_str(), taken->stage.c_str());
    if (taken->last) {
      std::printf(
          "%snode 0's last distributed stage is done (this node took part in %d stages); node 0 runs the rest of "
          "the road and writes "
          "the card\n",
          tag.c_str(), stages);
      std::fflush(stdout);
      return 0;
    }
    std::fflush(stdout);
  }
}

}  // namespace nanochat::cli
