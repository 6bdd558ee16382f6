#pragma once
// `nanochat data download --tasks [SPEC ...]`: fetch the hub datasets of the chat tasks into
// nanochat's task_data folders (tasks/hub.h, data/download.h download_hub_datasets).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nanochat/data/download.h"

namespace nanochat::cli {

/// Fetches the datasets `specs` name into <base>/task_data (base "" = $NANOCHAT_BASE_DIR). A spec
/// is a hub task name (SmolTalk, MMLU, GSM8K, ARC-Easy, ARC-Challenge, HumanEval: the subsets and
/// splits nanochat's chat_sft and chat_eval read) or NAME/SUBSET/SPLIT (one dataset); no spec:
/// every dataset nanochat's chat pipeline reads. Synthetic task names are noted and skipped.
/// Prints one line per dataset and a summary. Throws nanochat::Error for an unknown name, subset
/// or split (listing the known ones) or a failed download.
void download_task_data(const std::vector<std::string>& specs, const std::string& hub_url, const std::string& base,
                        const data::DownloadOptions& opt);

/// `nanochat data task-jsonl NAME`: writes examples of a task (registry.h open_task; synthetic ones
/// included) as nanochat's conversation JSON, one {"messages": [...]} per line, the form
/// `chat-sft --train-jsonl` reads. Registered under `data` by register_data.
void register_data_task_jsonl(CLI::App* data);

}  // namespace nanochat::cli
