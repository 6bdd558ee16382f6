#include "nanochat/train/job_checkpoint.h"

#include <filesystem>
#include <optional>

#include "nanochat/comm/communicator.h"
#include "nanochat/core/error.h"
#include "nanochat/dist/gather.h"
#include "nanochat/dist/net.h"
#include "nanochat/model/gpt.h"
#include "nanochat/optim/muon_adamw.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nanochat {

namespace {

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

std::string could_not_write(const std::string& path, const std::string& why) {
  return "could not write " + path + ": " + why;
}

const char* const kFolderHint =
    "Every node needs a writable checkpoint folder $NANOCHAT_BASE_DIR/base_checkpoints/<tag> of its own "
    "(check free space, permissions, and that no file sits where a folder must go)";

// "" when `dir` exists or was created, else the reason in could_not_write form.
std::string create_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec ? could_not_write(dir, "cannot create the directory (" + ec.message() + ")") : std::string();
}

// True when this rank's files of step `step` in `dir` (files_read_by_rank) match their marker.
bool intact_here(const std::string& dir, int64_t step, int rank, int world_size) {
  const CheckpointPaths cp{dir, step};
  try {
    const json marker = read_checkpoint_marker(cp);
    const int saved_w = marker.value("world_size", world_size);
    for (const auto& f : files_read_by_rank(cp, rank, world_size, saved_w))
      if (!check_checkpoint_file(marker, f).empty()) return false;
    return true;
  } catch (const std::exception&) {  // unreadable or malformed marker
    return false;
  }
}

}  // namespace

void prepare_checkpoint_dirs(Communicator& comm, const std::string& dir) {
  dist::throw_if_any_rank_failed(comm, create_dir(dir), str_cat("Nothing was trained. ", kFolderHint));
}

void save_job_checkpoint(Communicator& comm, const CheckpointPaths& cp, const GPT& model, const MuonAdamW& opt,
                         const std::map<std::string, std::string>& optim_metadata, const json& meta, bool fail_write) {
  const int rank = comm.rank(), W = comm.world_size();
  const std::string hint =
      str_cat("Step ", cp.step, " was not saved. ", kFolderHint, "; then resume from the last complete checkpoint");
  // 1. Every rank: its directory exists and the step's old marker is gone.
  std::string err = create_dir(cp.dir);
  if (err.empty()) try {
      begin_checkpoint(cp);
    } catch (const Error& e) {
      err = could_not_write(cp.marker(), e.what());
    }
  dist::throw_if_any_rank_failed(comm, err, hint);

  // 2. Every rank its optimizer shard (with its exact loader state); rank 0 the weights and meta.
  json crcs = json::object();
  std::string path = cp.optim(rank);
  try {
    if (fail_write) fail("fault injected by NANOCHAT_TEST_FAULT");
    write_safetensors_atomic(path, opt.state_entries(), optim_metadata);
    crcs[file_name(path)] = file_crc32(path);
    if (rank == 0) {
      std::vector<StWriteEntry> entries;
      for (const auto& p : model.params()) entries.push_back({p.name, "F32", p.shape, model.param_data() + p.offset});
      path = cp.model();
      write_safetensors_atomic(path, entries, {{"format", "nanochat.cpp"}});
      crcs[file_name(path)] = file_crc32(path);
      path = cp.meta();
      write_text_atomic(path, meta.dump(2));
      crcs[file_name(path)] = file_crc32(path);
    }
  } catch (const Error& e) {
    err = could_not_write(path, e.what());
  }
  dist::throw_if_any_rank_failed(comm, err, hint);

  // 3. Every rank: the marker with every file's CRC32, in its own directory.
  json all = json::object();
  for (const auto& s : dist::all_gather_strings(comm, crcs.dump())) all.update(json::parse(s));
  try {
    finish_checkpoint(cp, all, W);
  } catch (const Error& e) {
    err = could_not_write(cp.marker(), e.what());
  }
  dist::throw_if_any_rank_failed(comm, err, hint);
}

void rewrite_checkpoint_meta(const CheckpointPaths& cp, const json& meta) {
  const json marker = read_checkpoint_marker(cp);
  const std::string text = meta.dump(2), name = file_name(cp.meta());
  if (!marker.contains("crc32")) {  // a checkpoint from before checksums
    write_text_atomic(cp.meta(), text);
    return;
  }
  const uint32_t crc = bytes_crc32(text.data(), text.size());
  json crcs = marker.at("crc32");
  const int saved_w = marker.value("world_size", 1);
  // A kill between the two renames leaves either meta file accepted by the marker on disk.
  json both = json::array();
  if (crcs.contains(name)) both = crcs[name].is_array() ? crcs[name] : json::array({crcs[name]});
  both.push_back(crc);
  crcs[name] = both;
  finish_checkpoint(cp, crcs, saved_w);
  write_text_atomic(cp.meta(), text);
  crcs[name] = crc;
  finish_checkpoint(cp, crcs, saved_w);
}

std::vector<std::string> files_read_by_rank(const CheckpointPaths& cp, int rank, int world_size, int saved_world_size) {
  std::vector<std::string> files;
  if (rank == 0) files = {cp.model(), cp.meta()};
  if (saved_world_size == world_size)
    files.push_back(cp.optim(rank));
  else if (rank == 0)
    for (int r = 0; r < saved_world_size; ++r) files.push_back(cp.optim(r));
  return files;
}

void agree_on_checkpoint_load(Communicator& comm, const CheckpointPaths& cp, const std::string& error,
                              const std::string& corrupt) {
  const json mine = {{"host", dist::host_name()}, {"error", error}, {"corrupt", corrupt}};
  const std::vector<std::string> all = dist::all_gather_strings(comm, mine.dump());
  std::string first_corrupt, first_error;
  for (size_t j = 0; j < all.size(); ++j) {
    const json theirs = json::parse(all[j]);
    const std::string c = theirs.value("corrupt", ""), e = theirs.value("error", "");
    if (first_corrupt.empty() && !c.empty())
      first_corrupt = str_cat(c, " (found by rank ", j, " on host ", theirs.value("host", "?"), ")");
    if (first_error.empty() && !e.empty()) first_error = e;
  }
  if (first_corrupt.empty()) {
    if (!first_error.empty()) fail(first_error);
    return;
  }
  // Rank 0's complete steps, newest first: the first one intact on every rank is the way back.
  std::string steps_text = comm.rank() == 0 ? json(complete_checkpoint_steps(cp.dir)).dump() : std::string();
  steps_text = dist::all_gather_strings(comm, steps_text).front();
  const auto steps = json::parse(steps_text).get<std::vector<int64_t>>();
  std::optional<int64_t> intact;
  for (auto it = steps.rbegin(); it != steps.rend() && !intact; ++it) {
    if (*it == cp.step) continue;
    double bad = intact_here(cp.dir, *it, comm.rank(), comm.world_size()) ? 0.0 : 1.0;
    comm.all_reduce_sum_f64(&bad, 1)->wait();
    if (bad == 0.0) intact = *it;
  }
  if (intact)
    fail(first_corrupt, ". The newest intact checkpoint in ", cp.dir, " is step ", *intact,
         ": resume with --resume-from-step ", *intact);
  fail(first_corrupt, ". ", cp.dir, " holds no other intact checkpoint: start afresh (without --resume-from-step)");
}

}  // namespace nanochat
