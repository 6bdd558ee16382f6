#include "nanochat/train/report.h"

#include <cstdio>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/profile.h"

using json = nlohmann::json;

namespace nanochat {

namespace {
// " | comm wait: x%" (rank 0's seconds blocked on the others, of the step) when W > 1.
std::string comm_wait_of(const StepReport& r) {
  if (r.world_size <= 1) return {};
  char cw[48];
  std::snprintf(cw, sizeof cw, " | comm wait: %.1f%%", 100.0 * r.comm_wait / r.dt);
  return cw;
}

// The W > 1 ranks part of a step's line: each rank's share, compute + wait seconds and tok/s.
std::string ranks_of(const StepReport& r) {
  if (r.world_size <= 1) return {};
  std::string l = r.times_of_this_step ? " | ranks: " : " | ranks (other nodes at their last round's end): ";
  for (size_t k = 0; k < r.ranks.size(); ++k) {
    const RankReport& q = r.ranks[k];
    char b[128];
    if (q.compute + q.wait <= 0 && q.tok_per_sec == 0)
      std::snprintf(b, sizeof b, "%sr%zu %.0f%% -", k ? ", " : "", k, 100.0 * q.share);
    else
      std::snprintf(b, sizeof b, "%sr%zu %.0f%% %.2fs+%.2fs %s tok/s", k ? ", " : "", k, 100.0 * q.share, q.compute,
                    q.wait, with_commas(q.tok_per_sec).c_str());
    l += b;
  }
  return l;
}
}  // namespace

std::string step_log_line(const StepReport& r) {
  const double pct = 100.0 * static_cast<double>(r.step) / static_cast<double>(r.num_iterations);
  const json& ls = r.loader_state;
  char line[512];
  std::snprintf(line, sizeof line,
                "step %05lld/%05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | mfu: %.2f | "
                "epoch: %s pq: %s rg: %s | total time: %.2fm",
                static_cast<long long>(r.step), static_cast<long long>(r.num_iterations), pct, r.smooth_loss, r.lrm,
                r.dt * 1e3, with_commas(r.tok_per_sec).c_str(), r.mfu, ls.value("epoch", json(0)).dump().c_str(),
                ls.value("pq_idx", json(0)).dump().c_str(), ls.value("rg_idx", json(0)).dump().c_str(),
                r.total_training_time / 60.0);
  std::string l = line + comm_wait_of(r);
  if (r.step > 10) {
    char eta[64];
    std::snprintf(eta, sizeof eta, " | eta: %.1fm",
                  static_cast<double>(r.num_iterations - r.step) * r.total_training_time /
                      static_cast<double>(r.step - 10) / 60.0);
    l += eta;
  }
  return l + ranks_of(r);
}

std::string sft_step_log_line(const StepReport& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "step %05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | mfu: %.2f | epoch: %s | "
                "total time: %.2fm",
                static_cast<long long>(r.step + 1), 100.0 * r.progress, r.smooth_loss, r.lrm, r.dt * 1e3,
                with_commas(r.tok_per_sec).c_str(), r.mfu, r.loader_state.value("epoch", json(1)).dump().c_str(),
                r.total_training_time / 60.0);
  return line + comm_wait_of(r) + ranks_of(r);
}

std::vector<std::string> profile_report_lines(int rank, int64_t steps, double seconds) {
  std::vector<std::string> out;
  out.push_back(str_cat("Profile of rank ", rank, " over ", steps,
                        " steps (wall time per step, share of the step; the first steps include warm-up):"));
  double covered = 0;
  char b[128];
  for (size_t k = 0; k < prof::kNumOps; ++k) {
    const auto op = static_cast<prof::Op>(k);
    const double sec = prof::seconds(op);
    covered += sec;
    std::snprintf(b, sizeof b, "  %-16s %9.1f ms %6.1f%%", prof::name(op), 1e3 * sec / static_cast<double>(steps),
                  100.0 * sec / seconds);
    out.push_back(b);
  }
  std::snprintf(b, sizeof b, "  %-16s %9.1f ms %6.1f%%", "rest", 1e3 * (seconds - covered) / static_cast<double>(steps),
                100.0 * (seconds - covered) / seconds);
  out.push_back(b);
  return out;
}

}  // namespace nanochat
