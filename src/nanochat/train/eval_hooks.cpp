#include "nanochat/train/eval_hooks.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/comm/communicator.h"
#include "nanochat/comm/typed.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/paths.h"
#include "nanochat/eval/core_eval.h"
#include "nanochat/train/metrics_log.h"
#include "nanochat/train/sync.h"

namespace nanochat {

ExtraEval core_metric_hook(int64_t every, int64_t max_per_task, GPT& model, const Tokenizer& tok, Communicator& comm,
                           bool quiet) {
  if (every <= 0) return {};
  std::string why;
  std::shared_ptr<CoreBundle> bundle;
  try {
    bundle = std::make_shared<CoreBundle>(read_core_bundle(base_dir() + "/eval_bundle"));
  } catch (const Error& e) {
    why = e.what();
  }
  const std::vector<std::string> all = all_gather_strings(comm, why);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) {
      if (!quiet)
        print_line_if(comm.rank() == 0,
                      str_cat("NOTE: the CORE metric (--core-metric-every) is skipped: rank ", r,
                              " cannot read its eval bundle: ", all[r],
                              " (every rank needs it: `nanochat data download --eval-bundle` on each node; or run "
                              "base-eval on the saved checkpoint; --core-metric-every -1 silences this)"));
      return {};
    }
  return [every, max_per_task, &model, &tok, bundle](int64_t step, bool last, MetricsLog& metrics, StepSync& sync) {
    if (!(last || (step > 0 && step % every == 0))) return;
    const CoreRanks ranks{sync.rank(), sync.world_size(), [&sync](double* v, size_t n) { sync.sum_over_ranks(v, n); }};
    const CoreResult r = evaluate_core(model, tok, *bundle, max_per_task, {}, ranks);
    char b[96];
    std::snprintf(b, sizeof b, "Step %05lld | CORE metric: %.4f", static_cast<long long>(step), r.core_metric);
    print_line_if(sync.rank() == 0, b);
    nlohmann::json rec{{"step", step}, {"core_metric", r.core_metric}};
    for (const CoreTaskResult& t : r.tasks) rec["centered/" + t.label] = t.centered;
    metrics.record(rec);
  };
}

}  // namespace nanochat
