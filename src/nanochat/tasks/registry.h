#pragma once
// Tasks by name, as nanochat's scripts open them (scripts/chat_sft.py, chat_eval.py, chat_rl.py):
//
//   name            subset (default)                  splits (default)
//   SmolTalk        default                           train, test (train)
//   MMLU            all                               auxiliary_train, validation, dev, test (test)
//   GSM8K           main, socratic (main)             train, test (test)
//   ARC-Easy        ARC-Easy                          train, validation, test (test)
//   ARC-Challenge   ARC-Challenge                     train, validation, test (test)
//   HumanEval       openai_humaneval                  test (test)
//   SpellingBee, Arithmetic, Identity   synthetic (synthetic.h): train, test (train); made on the
//                   machine from a word list, no download
//
// The hub tasks read $NANOCHAT_BASE_DIR/task_data/... (hub.h) as downloaded by
// `nanochat data download --tasks <name>`. Names are matched exactly (nanochat's spelling).
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/tasks/hub.h"
#include "nanochat/tasks/task.h"

namespace nanochat::tasks {

struct TaskOptions {
  std::string base_dir;  ///< where task_data/ lies; "" = nanochat::base_dir() ($NANOCHAT_BASE_DIR)
  /// nanochat's Task(start, stop, step) view; stop < 0 = to the end (TaskSlice). The default
  /// (0, -1, 1) returns the task itself.
  int64_t start = 0, stop = -1, step = 1;
  std::string words_path;  ///< synthetic tasks' word list; "" = /usr/share/dict/words
};

/// The task `name` (table above) with `subset` and `split` ("" = the default). Throws
/// nanochat::Error naming the known names, subsets or splits when one is not known; when the
/// dataset is not downloaded, naming the missing manifest and the download command; and like the
/// task's reader for a malformed file.
TaskPtr open_task(const std::string& name, const std::string& subset = "", const std::string& split = "",
                  const TaskOptions& options = {});

/// A hub task's datasets: every (subset, split) it can read, for `nanochat data download`.
/// Throws nanochat::Error listing the hub task names when `name` is not one (synthetic ones
/// included: they need no download).
std::vector<HubSource> hub_sources(const std::string& name);

/// The hub task names in the table's order ("SmolTalk", "MMLU", "GSM8K", "ARC-Easy",
/// "ARC-Challenge", "HumanEval").
std::vector<std::string> hub_task_names();

/// The datasets nanochat's chat pipeline uses (chat_sft's mixture and chat_eval's tasks): what
/// `nanochat data download --tasks` fetches without names.
std::vector<std::pair<std::string, HubSource>> default_hub_downloads();

}  // namespace nanochat::tasks
