#include "nanochat/checkpoint/loop_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/legacy.h"
#include "nanochat/cluster/gather.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/data/loader.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"
#include "nanochat/plan/plan.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat {

namespace {

void print0(const Communicator& comm, const std::string& s) {
  if (comm.rank() != 0) return;
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

// Rank 0 reads and checks the weights and the meta; every rank gets the meta, the marker and the
// weights, or the same error.
void load_weights_and_meta(Communicator& comm, const CheckpointPaths& cp, GPT& model, json& meta, json& marker) {
  std::string meta_text, marker_text, error, corrupt;
  if (comm.rank() == 0) try {
      const json m = read_checkpoint_marker(cp);
      marker_text = m.dump();
      for (const std::string& f : {cp.model(), cp.meta()})
        if (corrupt.empty()) corrupt = check_checkpoint_file(m, f);
      if (corrupt.empty()) {
        meta_text = read_checkpoint_meta(cp).dump();
        StFile weights = load_safetensors(cp.model());
        for (const auto& p : model.params()) {
          const StTensor& t = weights.at(p.name);
          if (t.shape != p.shape || t.dtype != "F32")
            fail("checkpoint ", cp.model(), ": tensor ", p.name,
                 " has the wrong shape or dtype for the model the flags give");
          std::memcpy(model.param_data() + p.offset, t.bytes.data(), p.numel * sizeof(float));
        }
      }
    } catch (const std::exception& e) {  // also a malformed file's JSON
      error = e.what();
    }
  agree_on_checkpoint_load(comm, cp, error, corrupt);
  cluster::broadcast_string(comm, meta_text, 0);
  cluster::broadcast_string(comm, marker_text, 0);
  comm.broadcast(model.param_data(), model.num_params() * sizeof(float), 0)->wait();
  meta = json::parse(meta_text);
  marker = json::parse(marker_text);
}

// Rank 0 holds `whole` (the whole optimizer state under opt's layout): it loads its own part and
// sends every other rank only its part (point to point, one rank after the other); the AdamW step
// counts go to every rank.
void deal_whole_state(Communicator& comm, MuonAdamW::WholeState& whole, MuonAdamW& opt) {
  int64_t nsteps = static_cast<int64_t>(whole.steps.size());
  comm.broadcast(&nsteps, sizeof nsteps, 0)->wait();
  whole.steps.resize(static_cast<size_t>(nsteps));
  comm.broadcast(whole.steps.data(), whole.steps.size() * sizeof(int64_t), 0)->wait();
  if (comm.rank() == 0) {
    opt.load_whole_state(whole);
    for (int r = 1; r < comm.world_size(); ++r) {
      const std::vector<float> part = opt.whole_state_part(whole, r);
      comm.send(part.data(), part.size() * sizeof(float), r)->wait();
    }
  } else {
    std::vector<float> part(opt.whole_state_part_floats(comm.rank()));
    comm.recv(part.data(), part.size() * sizeof(float), 0)->wait();
    opt.load_whole_state_part(part, whole.steps);
  }
}

// Rank 0's part of a re-shard: reads every old shard into the whole state and gives every new rank
// the one-rank stream's loader state (JSON array, one per new rank).
void read_old_shards(const CheckpointPaths& cp, const json& marker, int W0, int W, bool one_rank_stream,
                     const MuonAdamW& opt, MuonAdamW::WholeState& whole, std::string& states_text,
                     std::string& corrupt) {
  std::vector<StFile> shards;
  std::vector<json> old_states;
  for (int r = 0; r < W0; ++r) {
    if (!fs::exists(cp.optim(r)))
      fail("resuming the ", W0, "-rank checkpoint ", cp.meta(), " with ", W,
           " ranks needs every old shard on rank 0, but ", cp.optim(r), " is missing; copy all optim_", cp.step,
           "_rank<r> files into ", cp.dir, " on this node");
    corrupt = check_checkpoint_file(marker, cp.optim(r));
    if (!corrupt.empty()) return;
    shards.push_back(load_safetensors(cp.optim(r)));
    old_states.push_back(loader_state_of_shard(shards.back()));
  }
  whole = opt.assemble_whole_state(shards);
  // The one-rank stream's position after a step is the same at any world size: it carries over
  // (rank-strided streams of earlier versions continue as one: checkpoint/legacy.h).
  if (W0 == W && one_rank_stream) {  // each rank its own saved state (all equal in a one-rank stream)
    states_text = json(old_states).dump();
    return;
  }
  const json state = one_rank_stream ? old_states.front() : strided_streams_as_one(old_states);
  states_text = json(std::vector<json>(static_cast<size_t>(W), state)).dump();
}

// Another world size: rank 0 reassembles the whole optimizer state and sends each rank only its
// part (point to point, one rank after the other); returns this rank's loader state.
json reshard(Communicator& comm, const CheckpointPaths& cp, const json& marker, int W0, bool one_rank_stream,
             MuonAdamW& opt) {
  const int W = comm.world_size();
  MuonAdamW::WholeState whole;
  std::string states_text, error, corrupt;
  if (comm.rank() == 0) try {
      read_old_shards(cp, marker, W0, W, one_rank_stream, opt, whole, states_text, corrupt);
    } catch (const std::exception& e) {
      error = e.what();
    }
  // rank 0's failure reaches every rank at once (they would otherwise wait in the broadcast)
  agree_on_checkpoint_load(comm, cp, error, corrupt);
  deal_whole_state(comm, whole, opt);
  cluster::broadcast_string(comm, states_text, 0);
  if (W0 == W && one_rank_stream)
    print0(comm, W0 == 1 ? str_cat("Read the optimizer state of its one rank from ", cp.dir)
                         : str_cat("Read the optimizer state of all ", W0, " ranks from ", cp.dir, " on rank 0"));
  else
    print0(comm, str_cat("Re-sharded the optimizer state of ", W0, " ranks for ", W, " ranks; ",
                         one_rank_stream ? "the data stream resumes exactly"
                                         : "the checkpoint's ranks read separate data streams: the data resumes as "
                                           "one stream after the furthest row group they read (approximate)"));
  return json::parse(states_text).at(static_cast<size_t>(comm.rank()));
}

}  // namespace

json loader_state_of_shard(const StFile& f) {
  auto it = f.metadata.find("loader_state");
  if (it == f.metadata.end())
    fail("checkpoint ", f.path, " has no loader state; it was not written by a complete save");
  return json::parse(it->second);
}

json checkpoint_meta(const RunMeta& run_meta, const LoopState& state) {
  json meta = run_meta.to_json();
  meta.update(state.to_json());
  return meta;
}

CheckpointPaths save_checkpoint(Communicator& comm, const std::string& dir, const GPT& model, const MuonAdamW& opt,
                                const RunMeta& run_meta, const LoopState& state, const FaultInjector& faults,
                                const std::string& what) {
  CheckpointPaths cp{dir, state.step};
  auto optim_meta = opt.state_metadata();
  optim_meta["loader_state"] = state.loader_state.dump();
  save_job_checkpoint(comm, cp, model, opt, optim_meta, checkpoint_meta(run_meta, state), faults);
  std::string line = "Saved " + what;
  line.append(" ").append(cp.model());
  print0(comm, line);
  return cp;
}

void copy_checkpoint_state(Communicator& comm, const GPT& model, const MuonAdamW& opt, const RunMeta& run_meta,
                           const LoopState& state, JobStateCopy* copy) {
  auto optim_meta = opt.state_metadata();
  optim_meta["loader_state"] = state.loader_state.dump();
  copy_job_state(comm, model, opt, optim_meta, checkpoint_meta(run_meta, state), state.step, copy);
}

LoopState resume(Communicator& comm, const TrainPlan& plan, int64_t step, GPT& model, MuonAdamW& opt) {
  const CheckpointPaths cp{plan.checkpoint_dir, step};
  json meta, marker;
  load_weights_and_meta(comm, cp, model, meta, marker);
  const RunMeta run = RunMeta::from_json(meta, cp.meta());
  check_resume(plan, run, cp.meta());
  if (const std::string note = resume_dtype_note(plan, run, cp.meta()); !note.empty()) print0(comm, note);
  const int W0 = run.world_size;
  LoopState state = LoopState::from_json(meta);
  const bool one_rank_stream = run.one_rank_stream();
  // Node 0 holds every shard (checkpoints written by node 0 alone, or a shared folder): it reads them
  // all and deals the state at any world size (shards left on their nodes: checkpoint/legacy.h).
  const bool own_shards = resumes_shards_left_on_their_nodes(comm, cp, W0, one_rank_stream);
  state.loader_state =
      own_shards ? load_own_shard(comm, cp, marker, opt) : reshard(comm, cp, marker, W0, one_rank_stream, opt);
  print0(comm, str_cat("Resumed from step ", state.step, " (", cp.model(), ")"));
  return state;
}

RunMeta warm_start(Communicator& comm, const CheckpointPaths& cp, GPT& model, MuonAdamW& opt, bool with_optimizer,
                   bool* optimizer_loaded) {
  json meta_json, marker;
  load_weights_and_meta(comm, cp, model, meta_json, marker);
  const RunMeta meta = RunMeta::from_json(meta_json, cp.meta());
  *optimizer_loaded = false;
  if (!with_optimizer) return meta;
  const int W0 = std::max(1, meta.world_size);
  std::string present = "1", error, corrupt;
  MuonAdamW::WholeState whole;
  if (comm.rank() == 0) try {
      for (int r = 0; r < W0; ++r)
        if (!fs::exists(cp.optim(r))) present = "0";
      std::vector<StFile> shards;
      for (int r = 0; r < W0 && present == "1" && corrupt.empty(); ++r) {
        corrupt = check_checkpoint_file(marker, cp.optim(r));
        if (corrupt.empty()) shards.push_back(load_safetensors(cp.optim(r)));
      }
      if (present == "1" && corrupt.empty()) whole = opt.assemble_whole_state(shards);
    } catch (const std::exception& e) {
      error = e.what();
    }
  agree_on_checkpoint_load(comm, cp, error, corrupt);
  cluster::broadcast_string(comm, present, 0);
  if (present != "1") return meta;
  deal_whole_state(comm, whole, opt);
  *optimizer_loaded = true;
  return meta;
}

}  // namespace nanochat
