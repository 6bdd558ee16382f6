#include "nanochat/checkpoint/loop_state.h"

#include <cmath>

namespace nanochat {

using json = nlohmann::json;

json number_or_infinity(double v) {
  if (std::isinf(v)) return "Infinity";
  if (std::isnan(v)) return nullptr;
  return v;
}

namespace {
double from_number_or_infinity(const json& j) {
  if (j.is_string()) return std::numeric_limits<double>::infinity();
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  return j.get<double>();
}
}  // namespace

json LoopState::to_json() const {
  return json{{"step", step},
              {"val_bpb", number_or_infinity(val_bpb)},
              {"dataloader_state_dict", loader_state},
              {"loop_state",
               {{"min_val_bpb", number_or_infinity(min_val_bpb)},
                {"smooth_train_loss", smooth_train_loss},
                {"total_training_time", total_training_time}}}};
}

LoopState LoopState::from_json(const json& meta) {
  LoopState s;
  s.step = meta.at("step").get<int64_t>();
  s.val_bpb = from_number_or_infinity(meta.value("val_bpb", json(nullptr)));
  const json& ls = meta.at("loop_state");
  s.min_val_bpb = from_number_or_infinity(ls.at("min_val_bpb"));
  s.smooth_train_loss = ls.at("smooth_train_loss").get<double>();
  s.total_training_time = ls.at("total_training_time").get<double>();
  s.loader_state = meta.value("dataloader_state_dict", json(nullptr));
  return s;
}

}  // namespace nanochat
