#include "nanochat/checkpoint/run_meta.h"

#include <set>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"

using json = nlohmann::json;

namespace nanochat {

namespace {

// The loop state's fields (checkpoint/loop_state.h) and the record's own.
const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {
      "step",         "val_bpb",           "loop_state",     "dataloader_state_dict", "model_config",
      "user_config",  "device_batch_size", "max_seq_len",    "total_batch_size",      "world_size",
      "dtype",        "data_stream",       "tokenizer_hash", "base_checkpoint",       "muon_weight_decay",
      "imported_from"};
  return k;
}

template <typename V>
std::optional<V> optional_field(const json& meta, const char* key) {
  if (!meta.contains(key) || meta[key].is_null()) return std::nullopt;
  return meta[key].get<V>();
}

std::string string_field(const json& meta, const char* key) {
  return meta.contains(key) && !meta[key].is_null() ? meta[key].get<std::string>() : std::string();
}

}  // namespace

json RunMeta::to_json() const {
  json j = extra.is_object() ? extra : json::object();
  j["model_config"] = model_config.to_json();
  j["user_config"] = user_config;
  if (device_batch_size) j["device_batch_size"] = *device_batch_size;
  if (max_seq_len) j["max_seq_len"] = *max_seq_len;
  if (total_batch_size) j["total_batch_size"] = *total_batch_size;
  j["world_size"] = world_size;
  if (!dtype.empty()) j["dtype"] = dtype;
  if (!data_stream.empty()) j["data_stream"] = data_stream;
  if (!tokenizer_hash.empty()) j["tokenizer_hash"] = tokenizer_hash;
  if (!base_checkpoint.empty()) j["base_checkpoint"] = base_checkpoint;
  if (muon_weight_decay) j["muon_weight_decay"] = *muon_weight_decay;
  if (!imported_from.empty()) j["imported_from"] = imported_from;
  return j;
}

RunMeta RunMeta::from_json(const json& meta, const std::string& path) {
  const char* field = "the file";
  try {
    if (!meta.is_object()) fail("it is not a JSON object");
    RunMeta m;
    field = "model_config";
    if (!meta.contains("model_config")) fail("it has no model_config");
    m.model_config = ModelConfig::from_json(meta.at("model_config"));
    field = "user_config";
    if (meta.contains("user_config") && meta["user_config"].is_object()) m.user_config = meta["user_config"];
    field = "device_batch_size";
    m.device_batch_size = optional_field<int64_t>(meta, "device_batch_size");
    field = "max_seq_len";
    m.max_seq_len = optional_field<int64_t>(meta, "max_seq_len");
    field = "total_batch_size";
    m.total_batch_size = optional_field<int64_t>(meta, "total_batch_size");
    field = "world_size";
    m.world_size = optional_field<int>(meta, "world_size").value_or(1);
    field = "dtype";
    m.dtype = string_field(meta, "dtype");
    field = "data_stream";
    m.data_stream = string_field(meta, "data_stream");
    field = "tokenizer_hash";
    m.tokenizer_hash = string_field(meta, "tokenizer_hash");
    field = "base_checkpoint";
    m.base_checkpoint = string_field(meta, "base_checkpoint");
    field = "muon_weight_decay";
    m.muon_weight_decay = optional_field<double>(meta, "muon_weight_decay");
    field = "imported_from";
    m.imported_from = string_field(meta, "imported_from");
    for (const auto& [k, v] : meta.items())
      if (!known_fields().count(k)) m.extra[k] = v;
    return m;
  } catch (const std::exception& e) {  // nanochat::Error, or a field of the wrong JSON type
    fail(path, ": ", field, ": ", e.what());
  }
}

void check_resume(const TrainPlan& plan, const RunMeta& meta, const std::string& meta_path) {
  ModelConfig saved = meta.model_config;
  if (plan.meta_sequence_len_is_T) saved.sequence_len = plan.model.sequence_len;  // chat-sft's (nanochat's)
  if (!(saved == plan.model))
    fail("cannot resume from ", meta_path, ": its model_config ", saved.to_json().dump(),
         " differs from the one the flags give ", plan.model.to_json().dump());
  if (meta.world_size < 1) fail("checkpoint ", meta_path, ": world_size ", meta.world_size, " is not a rank count");
  // the device batch may differ: a step is the same rows of the one data stream for any micro-batch size
  const int64_t total = meta.total_batch_size.value_or(0), T = meta.max_seq_len.value_or(plan.T);
  if (total != plan.total_batch_size || T != plan.T)
    fail("cannot resume from ", meta_path, ": it used --total-batch-size ", total, " and --max-seq-len ", T,
         "; pass the same values to resume exactly");
}

std::string resume_dtype_note(const TrainPlan& plan, const RunMeta& meta, const std::string& meta_path) {
  const std::string saved = meta.dtype_or_float32();
  if (saved == compute_dtype_name(plan.dtype)) return "";
  return str_cat("NOTE: ", meta_path, " was trained with --dtype ", saved, "; this run continues with --dtype ",
                 compute_dtype_name(plan.dtype), " (weights and optimizer state are fp32 in both; pass --dtype ", saved,
                 " to keep the checkpoint's numerics)");
}

}  // namespace nanochat
