#pragma once
// The files of the DCLM eval bundle that nanochat's CORE metric reads (scripts/base_eval.py
// evaluate_core), from <bundle>/ = $NANOCHAT_BASE_DIR/eval_bundle/:
//   core.yaml           `icl_tasks:` a list of {label, dataset_uri, num_fewshot: [k, ...],
//                       icl_task_type, continuation_delimiter (default " ")}; nanochat uses
//                       num_fewshot[0]. Read by a YAML subset parser: block mappings and lists,
//                       flow lists, plain / 'single' / "double" quoted scalars, # comments.
//   eval_meta_data.csv  a header row naming "Eval Task" and "Random baseline" (percent) columns.
//   eval_data/<dataset_uri>  one JSON object per line:
//     multiple_choice    {"query": str, "choices": [str, ...], "gold": int}
//     schema             {"context_options": [str, ...], "continuation": str, "gold": int}
//     language_modeling  {"context": str, "continuation": str}
// Errors name the file (and line) and, for a missing file, the download command.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanochat {

enum class CoreTaskType { MultipleChoice, Schema, LanguageModeling };

/// The name core.yaml gives a type: multiple_choice, schema, language_modeling.
const char* core_task_type_name(CoreTaskType t);

/// One task of core.yaml.
struct CoreTask {
  std::string label;
  std::string dataset_uri;  ///< relative to <bundle>/eval_data
  CoreTaskType type = CoreTaskType::MultipleChoice;
  int num_fewshot = 0;          ///< num_fewshot[0]
  std::string delimiter = " ";  ///< continuation_delimiter
};

/// One example of a task (the fields its type uses; the others stay empty).
struct CoreItem {
  std::string query;                         ///< multiple_choice
  std::vector<std::string> choices;          ///< multiple_choice
  std::vector<std::string> context_options;  ///< schema
  std::string context;                       ///< language_modeling
  std::string continuation;                  ///< schema, language_modeling
  int gold = 0;                              ///< multiple_choice, schema: index of the right option
};

struct CoreBundle {
  std::string dir;
  std::vector<CoreTask> tasks;                    ///< core.yaml's order
  std::map<std::string, double> random_baseline;  ///< label -> percent, from eval_meta_data.csv
};

/// The command that fetches the bundle, for error messages.
extern const char* const kEvalBundleDownloadHint;

/// Reads core.yaml and eval_meta_data.csv of the bundle at `dir`. Throws nanochat::Error naming the
/// missing file and kEvalBundleDownloadHint, or the file and line of a malformed entry (an unknown
/// task type, a task without a random baseline, a value of the wrong kind).
CoreBundle read_core_bundle(const std::string& dir);

/// The examples of `task` in file order. Throws nanochat::Error naming the file and line of a line
/// that is not JSON or lacks a field of the task's type (or a gold index out of range).
std::vector<CoreItem> read_core_task_data(const CoreBundle& bundle, const CoreTask& task);

/// The YAML subset core.yaml uses, as JSON (integers, booleans, null, strings, lists, objects).
/// `name` is used in errors ("<name>:<line>: ..."). Throws nanochat::Error for anything else.
nlohmann::json parse_yaml_subset(const std::string& text, const std::string& name);

/// CSV rows (RFC 4180 quoting, "" inside quotes; \n or \r\n line ends), the header row first.
std::vector<std::vector<std::string>> parse_csv(const std::string& text);

}  // namespace nanochat
