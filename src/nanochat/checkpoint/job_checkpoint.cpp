#include "nanochat/checkpoint/job_checkpoint.h"
#include "nanochat/checkpoint/legacy.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "nanochat/cluster/gather.h"
#include "nanochat/cluster/net.h"
#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
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
    "Node 0 (rank 0) writes the whole checkpoint into its folder $NANOCHAT_BASE_DIR/base_checkpoints/<tag>: it must "
    "be writable (check free space, permissions, and that no file sits where a folder must go)";

// One rank's optimizer shard as bytes, to send it to rank 0: an 8-byte header length, a JSON
// header {"metadata": {...}, "tensors": [{"name", "dtype", "shape", "bytes"}]}, then the tensors'
// bytes in order.
std::string pack_shard(const std::vector<StWriteEntry>& entries, const std::map<std::string, std::string>& metadata) {
  json tensors = json::array();
  size_t total = 0;
  for (const auto& e : entries) {
    size_t n = st_dtype_size(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<size_t>(d);
    tensors.push_back({{"name", e.name}, {"dtype", e.dtype}, {"shape", e.shape}, {"bytes", n}});
    total += n;
  }
  const std::string header = json{{"metadata", metadata}, {"tensors", tensors}}.dump();
  const uint64_t hn = header.size();
  std::string out(sizeof hn + header.size() + total, '\0');
  std::memcpy(out.data(), &hn, sizeof hn);
  std::memcpy(out.data() + sizeof hn, header.data(), header.size());
  size_t at = sizeof hn + header.size();
  for (size_t k = 0; k < entries.size(); ++k) {
    const size_t n = tensors[k]["bytes"].get<size_t>();
    if (n) std::memcpy(out.data() + at, entries[k].data, n);
    at += n;
  }
  return out;
}

// Writes a packed shard (pack_shard) to `path` atomically. Throws nanochat::Error on a malformed
// pack (naming `from`) or a write failure.
void write_packed_shard(const std::string& path, const std::string& packed, const std::string& from) {
  uint64_t hn = 0;
  if (packed.size() < sizeof hn) fail("the optimizer shard sent by ", from, " is truncated");
  std::memcpy(&hn, packed.data(), sizeof hn);
  if (packed.size() < sizeof hn + hn) fail("the optimizer shard sent by ", from, " is truncated");
  const json header = json::parse(packed.substr(sizeof hn, hn));
  std::vector<StWriteEntry> entries;
  size_t at = sizeof hn + hn;
  for (const auto& t : header.at("tensors")) {
    const size_t n = t.at("bytes").get<size_t>();
    if (at + n > packed.size()) fail("the optimizer shard sent by ", from, " is truncated");
    entries.push_back({t.at("name").get<std::string>(), t.at("dtype").get<std::string>(),
                       t.at("shape").get<std::vector<int64_t>>(), packed.data() + at});
    at += n;
  }
  write_safetensors_atomic(path, entries, header.at("metadata").get<std::map<std::string, std::string>>());
}

// "" when `dir` exists or was created, else the reason in could_not_write form.
std::string create_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec ? could_not_write(dir, "cannot create the directory (" + ec.message() + ")") : std::string();
}

// True when this rank's files of step `step` in `dir` (files_read_by_rank) match their marker.
bool intact_here(const std::string& dir, int64_t step, int rank, int world_size) {
  const CheckpointPaths cp{dir, step};
  // a worker reads nothing of a checkpoint node 0 holds whole (and may have no marker at all)
  if (rank != 0 && !std::filesystem::exists(cp.optim(rank))) return true;
  try {
    const json marker = read_checkpoint_marker(cp);
    const int saved_w = marker.value("world_size", world_size);
    const auto files = files_read_by_rank(cp, rank, world_size, saved_w);
    for (const auto& f : files)
      if (!check_checkpoint_file(marker, f).empty()) return false;
    return true;
  } catch (const std::exception&) {  // unreadable or malformed marker
    return false;
  }
}

}  // namespace

void prepare_checkpoint_dirs(Communicator& comm, const std::string& dir) {
  const std::string err = comm.rank() == 0 ? create_dir(dir) : std::string();
  if (comm.rank() == 0 && err.empty()) remove_stale_checkpoint_tmp(dir);  // left by a save that was stopped
  cluster::throw_if_any_rank_failed(comm, err, str_cat("Nothing was trained. ", kFolderHint));
}

void save_job_checkpoint(Communicator& comm, const CheckpointPaths& cp, const GPT& model, const MuonAdamW& opt,
                         const std::map<std::string, std::string>& optim_metadata, const json& meta,
                         const FaultInjector& faults) {
  const int rank = comm.rank(), W = comm.world_size();
  const std::string hint =
      str_cat("Step ", cp.step, " was not saved. ", kFolderHint, "; then resume from the last complete checkpoint");
  // 1. Rank 0: its directory exists and the step's old marker is gone.
  std::string err = rank == 0 ? create_dir(cp.dir) : std::string();
  if (rank == 0 && err.empty()) try {
      begin_checkpoint(cp);
    } catch (const Error& e) {
      err = could_not_write(cp.marker(), e.what());
    }
  cluster::throw_if_any_rank_failed(comm, err, hint);

  // 2. Rank 0 writes every rank's optimizer shard (each sent to it in turn, with its loader
  // state), the weights and the meta, then the marker with every file's CRC32. A failure stops
  // rank 0's writing but not the exchange, so that no rank is left waiting.
  json crcs = json::object();
  std::string path;
  auto write = [&](const std::string& p, const std::function<void()>& body) {
    if (!err.empty()) return;
    path = p;
    try {
      faults.before_checkpoint_write(rank);
      body();
      crcs[file_name(p)] = file_crc32(p);
      faults.after_checkpoint_file(rank, cp.step, p);
    } catch (const std::exception& e) {  // also a malformed shard's JSON
      err = could_not_write(path, e.what());
    }
  };
  if (rank == 0)
    write(cp.optim(0), [&] { write_safetensors_atomic(cp.optim(0), opt.state_entries(), optim_metadata); });
  for (int r = 1; r < W; ++r) {  // rank r sends its shard's size, then the shard, to rank 0 alone
    if (rank == r) {
      const std::string packed = pack_shard(opt.state_entries(), optim_metadata);
      const uint64_t n = packed.size();
      comm.send(&n, sizeof n, 0)->wait();
      comm.send(packed.data(), packed.size(), 0)->wait();
    } else if (rank == 0) {
      uint64_t n = 0;
      comm.recv(&n, sizeof n, r)->wait();
      std::string packed(static_cast<size_t>(n), '\0');
      comm.recv(packed.data(), packed.size(), r)->wait();
      write(cp.optim(r), [&] { write_packed_shard(cp.optim(r), packed, str_cat("rank ", r)); });
    }
  }
  if (rank == 0) {
    write(cp.model(), [&] {
      std::vector<StWriteEntry> entries;
      for (const auto& p : model.params()) entries.push_back({p.name, "F32", p.shape, model.param_data() + p.offset});
      write_safetensors_atomic(cp.model(), entries, {{"format", "nanochat.cpp"}});
    });
    write(cp.meta(), [&] { write_file_atomic(cp.meta(), meta.dump(2)); });
    if (err.empty()) try {
        finish_checkpoint(cp, crcs, W);
      } catch (const Error& e) {
        err = could_not_write(cp.marker(), e.what());
      }
  }
  cluster::throw_if_any_rank_failed(comm, err, hint);
}

void copy_job_state(Communicator& comm, const GPT& model, const MuonAdamW& opt,
                    const std::map<std::string, std::string>& optim_metadata, const json& meta, int64_t step,
                    JobStateCopy* copy) {
  std::vector<std::string> shards = gather_strings(comm, pack_shard(opt.state_entries(), optim_metadata), 0);
  if (comm.rank() != 0) return;
  copy->params.assign(model.param_data(), model.param_data() + model.num_params());
  copy->shards = std::move(shards);
  copy->meta = meta;
  copy->step = step;
}

CheckpointPaths write_job_state_copy(const std::string& dir, const GPT& model, const JobStateCopy& copy) {
  NC_CHECK(copy.step >= 0 && copy.params.size() == model.num_params(), "no state copy to write");
  const CheckpointPaths cp{dir, copy.step};
  auto check = [](const std::string& err) {
    if (!err.empty()) fail(err);
  };
  check(create_dir(dir));
  begin_checkpoint(cp);
  json crcs = json::object();
  for (size_t r = 0; r < copy.shards.size(); ++r) {
    const std::string path = cp.optim(static_cast<int>(r));
    write_packed_shard(path, copy.shards[r], str_cat("rank ", r));
    crcs[file_name(path)] = file_crc32(path);
  }
  std::vector<StWriteEntry> entries;
  for (const auto& p : model.params()) entries.push_back({p.name, "F32", p.shape, copy.params.data() + p.offset});
  write_safetensors_atomic(cp.model(), entries, {{"format", "nanochat.cpp"}});
  crcs[file_name(cp.model())] = file_crc32(cp.model());
  write_file_atomic(cp.meta(), copy.meta.dump(2));
  crcs[file_name(cp.meta())] = file_crc32(cp.meta());
  finish_checkpoint(cp, crcs, static_cast<int>(copy.shards.size()));
  return cp;
}

void rewrite_checkpoint_meta(const CheckpointPaths& cp, const json& meta) {
  const json marker = read_checkpoint_marker(cp);
  const std::string text = meta.dump(2), name = file_name(cp.meta());
  if (!marker.contains("crc32")) {  // a checkpoint from before checksums (checkpoint/legacy.h)
    write_file_atomic(cp.meta(), text);
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
  write_file_atomic(cp.meta(), text);
  crcs[name] = crc;
  finish_checkpoint(cp, crcs, saved_w);
}

std::vector<std::string> files_read_by_rank(const CheckpointPaths& cp, int rank, int world_size, int saved_world_size) {
  std::vector<std::string> files;
  if (rank == 0) {
    files = {cp.model(), cp.meta()};
  }
  // shards left on their nodes by an earlier version: checkpoint/legacy.h
  if (const auto own = own_shard_file(cp, rank, world_size, saved_world_size)) {
    files.push_back(*own);
  } else if (rank == 0) {
    for (int r = 0; r < saved_world_size; ++r) files.push_back(cp.optim(r));
  }
  return files;
}

void agree_on_checkpoint_load(Communicator& comm, const CheckpointPaths& cp, const std::string& error,
                              const std::string& corrupt) {
  const json mine = {{"host", cluster::host_name()}, {"error", error}, {"corrupt", corrupt}};
  const std::vector<std::string> all = cluster::all_gather_strings(comm, mine.dump());
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
  // Rank 0's complete steps, newest first: the first one intact on every rank is the way back. The
  // advice names rank 0's folder and host (the one that writes checkpoints), on every rank.
  std::string steps_text =
      comm.rank() == 0
          ? json{{"steps", complete_checkpoint_steps(cp.dir)}, {"dir", cp.dir}, {"host", cluster::host_name()}}.dump()
          : std::string();
  steps_text = cluster::all_gather_strings(comm, steps_text).front();
  const json rank0 = json::parse(steps_text);
  const auto steps = rank0.at("steps").get<std::vector<int64_t>>();
  const std::string where =
      str_cat(rank0.value("dir", cp.dir), " (rank 0's folder, on host ", rank0.value("host", "?"), ")");
  std::optional<int64_t> intact;
  for (auto it = steps.rbegin(); it != steps.rend() && !intact; ++it) {
    if (*it == cp.step) continue;
    double bad = intact_here(cp.dir, *it, comm.rank(), comm.world_size()) ? 0.0 : 1.0;
    comm.all_reduce_sum_f64(&bad, 1)->wait();
    if (bad == 0.0) intact = *it;
  }
  if (intact)
    fail(first_corrupt, ". The newest intact checkpoint in ", where, " is step ", *intact,
         ": resume with --resume-from-step ", *intact);
  fail(first_corrupt, ". ", where, " holds no other intact checkpoint: start afresh (without --resume-from-step)");
}

}  // namespace nanochat
