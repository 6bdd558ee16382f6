#pragma once
// What `nanochat speedrun` has done so far, kept in <base>/report/speedrun.json so that the same
// command again skips the finished stages and continues an interrupted one:
//   {"road": {preset, offline, model_tag, started}, "plan": {...road/estimate.h...},
//    "stages": {"<id>": {"commands": [[...]], "status": "running"|"done", "started", "finished",
//                        "seconds", "outputs": {"<path>": "<crc32 hex> <bytes>"}, "runs": N}}}
// A stage counts as done only while its commands are the same and every output it recorded has
// the same checksum; otherwise it runs again, and so does every stage after it.
#include <nlohmann/json.hpp>
#include <string>

#include "nanochat/road/stages.h"

namespace nanochat::road {

/// The checksums of `s`'s outputs (paths relative to `base_dir` unless absolute): every regular
/// file of an output folder (not below it), or of a checkpoint folder the files of its last
/// complete step. {"<path>": "<crc32 hex> <bytes>"}.
nlohmann::json checksum_outputs(const Stage& s, const std::string& base_dir);

class Ledger {
 public:
  /// Loads `path` when it exists (an unreadable file is named and started afresh).
  explicit Ledger(std::string path);

  /// "" when `s` finished with these commands and outputs that still check; else why it runs.
  std::string why_run(const Stage& s, const std::string& base_dir) const;
  /// True when `s` was started with these commands and did not finish (resume from its checkpoint).
  bool interrupted(const Stage& s) const;

  /// A stage starts (`resuming`: it continues its interrupted run, whose seconds so far count).
  void started(const Stage& s, bool resuming = false);
  /// The running stage's seconds so far (written to the file: a kill keeps them).
  void progress(const std::string& id, double seconds);
  /// It finished after `seconds` of this run (plus an interrupted run's it continued).
  void finished(const Stage& s, double seconds, const std::string& base_dir);
  /// Forgets a stage's record (it runs again from its start).
  void forget(const std::string& id);

  nlohmann::json& road() { return j_["road"]; }
  nlohmann::json& plan() { return j_["plan"]; }
  const nlohmann::json& stage(const std::string& id) const;
  const nlohmann::json& all() const { return j_; }
  void save() const;

 private:
  std::string path_;
  nlohmann::json j_;
};

}  // namespace nanochat::road
