#pragma once
// `nanochat run [job flags] speedrun [its flags]`: the whole road as a job of several nodes, one
// command on each (docs/architecture.md 11.4). Node 0 walks the road (cli/speedrun.cpp) and runs
// each distributed stage (base-train, chat-sft) as `nanochat run [the same job flags] <stage>`,
// whose launcher publishes the stage in the job's store (launch/launcher.h LaunchOptions::publish);
// the evaluations, chat-rl and the rest run on node 0. Every other node starts once and follows:
// it reaches node 0's store, reads the stage node 0 publishes, runs it with node 0 (joining it
// when it is under way: an elastic job, --nnodes MIN:MAX, admits it at a step boundary), and
// waits for the next, until node 0 ran its last distributed stage. Such a node needs only this
// binary: node 0 sends the rows, the tokenizer and the checkpoints' state.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nanochat/launch/launcher.h"
#include "nanochat/road/estimate.h"

namespace nanochat::cli {

/// Node 0's environment variable that makes `speedrun` a job's leader: JSON {"run": the job's
/// `nanochat run` flags}.
inline constexpr const char* kRoadJobEnv = "NANOCHAT_ROAD_JOB";

/// What node 0 publishes for one distributed stage (its launcher's LaunchOptions::publish).
struct RoadStageNote {
  std::string id;                 ///< unique per launch (a stage run again is a new launch)
  std::string stage;              ///< the road's stage id ("base-train", "chat-sft")
  std::vector<std::string> args;  ///< the ranks' command line
  bool last = false;              ///< the road's last distributed stage: the followers end after it
  std::string to_json() const;
  /// Parses `text`; throws nanochat::Error naming what is missing.
  static RoadStageNote parse(const std::string& text);
};

/// Whether a stage command runs on every node of a road job (base-train, chat-sft).
bool distributed_stage_command(const std::vector<std::string>& command);

/// Node 0 of a road job: the job's `nanochat run` flags from kRoadJobEnv (empty: not a job).
std::vector<std::string> road_job_run_flags();

/// Node 0 of a road job: the stage `stage`'s command `c` as a launch of the job (`nanochat run`
/// with `run_flags`) that publishes it for the other nodes; `last`: no distributed stage comes
/// after it (the followers end after it).
std::vector<std::string> job_stage_command(const std::vector<std::string>& run_flags, const std::string& stage,
                                           const std::vector<std::string>& c, bool last);

/// Node 0 of a road job: the job's nodes measured together on the road's model (road-probe on every
/// node, its figures in `report_dir`/probe.json, its log in `report_dir`/logs/speed-probe.log)
/// against `alone` (this node's own probe of `base_train`), at base-train's batch. `last`: the
/// followers end after it (a plan only). A probe that fails leaves the plan at this node's speed,
/// saying so.
road::JobSpeed measure_job(const std::vector<std::string>& run_flags, const std::vector<std::string>& base_train,
                           int vocab, const road::SpeedProbe& alone, bool last, const std::string& report_dir);

/// Node 0 runs `speedrun` with `speedrun_args` as the leader of the job whose `nanochat run` flags
/// are `run_flags` (replaces this process). Does not return.
[[noreturn]] void lead_road_job(const std::vector<std::string>& run_flags,
                                const std::vector<std::string>& speedrun_args);

/// The hidden command every rank of a road job runs for node 0's plan: `road-probe --vocab V --out
/// FILE base-train <flags>` times the road's model on each rank at once (road/estimate.h
/// probe_speed) and an all-reduce of its parameters, and rank 0 writes every rank's figures to
/// FILE (JSON {"ranks": [{"micro_batch_s", "optimizer_s", "forward_s", "B", "T", "params",
/// "exchange_s", "probe_s" (the seconds it measured), "node"}]}).
void register_road_probe(CLI::App& app);

/// Another node of a road job: follows node 0's distributed stages with the launch options `L`
/// (this node's --node-rank, the job's shape) until node 0 ran its last one, or until `wait` passes
/// with no new stage. Returns the exit status (0: the road's distributed stages are done).
int follow_road_job(cluster::LaunchOptions L, cluster::Ms wait);

}  // namespace nanochat::cli
