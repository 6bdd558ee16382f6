// The road's folders in the base folder (contract in road_folders.h).
#include "nanochat/cli/road_folders.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "nanochat/checkpoint/checkpoint.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/report_log.h"

namespace nanochat::cli {

namespace fs = std::filesystem;

namespace {

// Where an earlier folder is kept when a stage replaces it: "<dir>.before-YYYY-MM-DD-HHMMSS".
std::string aside_name(const std::string& dir) {
  std::string stamp;  // local_timestamp()'s "YYYY-MM-DD HH:MM:SS" without its colons, the space a dash
  for (char c : local_timestamp())
    if (c != ':') stamp += c == ' ' ? '-' : c;
  return dir + ".before-" + stamp;
}

}  // namespace

std::vector<std::string> prepare_training(const std::string& base, const road::Stage& s, bool resume) {
  std::vector<std::string> extra;
  if (s.checkpoint_dir.empty()) return extra;
  const std::string dir = base + "/" + s.checkpoint_dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return extra;
  const auto last = last_complete_step(dir);
  const std::string& cmd = s.commands.size() == 1 ? s.commands[0][0] : std::string();
  const bool resumable = cmd == "base-train" || cmd == "chat-sft" || cmd == "chat-rl";
  if (resume && resumable && last && *last > 0) {
    std::printf("speedrun: %s was interrupted; it continues from its checkpoint at step %lld (%s)\n", s.id.c_str(),
                static_cast<long long>(*last), dir.c_str());
    return {"--resume-from-step", std::to_string(*last)};
  }
  const std::string aside = aside_name(dir);
  fs::rename(dir, aside, ec);
  if (ec) fail("speedrun: cannot move the earlier checkpoints ", dir, " aside to ", aside, ": ", ec.message());
  std::printf("speedrun: %s starts afresh; the earlier checkpoints in %s are kept in %s\n", s.id.c_str(), dir.c_str(),
              aside.c_str());
  return extra;
}

bool foreign_tokenizer(const std::string& base, const road::Ledger& ledger, bool replace_tokenizer) {
  std::error_code ec;
  return fs::exists(base + "/tokenizer/tokenizer.json", ec) && ledger.stage("tok-train").empty() && !replace_tokenizer;
}

void prepare_tokenizer(const std::string& base, const road::Stage& s, bool foreign) {
  if (s.id != "tok-train") return;
  const std::string dir = base + "/tokenizer";
  std::error_code ec;
  if (!fs::exists(dir + "/tokenizer.json", ec)) return;
  if (foreign)
    fail("speedrun: ", dir,
         " holds a tokenizer this road did not make, and the models trained with it (e.g. "
         "the quickstart's base_checkpoints/demo) need it; the road trains its own. Run the road in another base "
         "folder (NANOCHAT_BASE_DIR=",
         base, "-speedrun), or pass --replace-tokenizer (the old one is kept in ", dir, ".before-<time>)");
  const std::string aside = aside_name(dir);
  fs::rename(dir, aside, ec);
  if (ec) fail("speedrun: cannot move the tokenizer ", dir, " aside to ", aside, ": ", ec.message());
  std::printf("speedrun: tok-train makes a new tokenizer; the one in %s is kept in %s\n", dir.c_str(), aside.c_str());
}

}  // namespace nanochat::cli
