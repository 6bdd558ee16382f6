#include "nanochat/train/test_fault.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "nanochat/core/error.h"
#include "nanochat/model/gpt.h"

namespace nanochat {

namespace {

class HookFaults final : public FaultInjector {
 public:
  explicit HookFaults(TrainTestHooks hooks) : h_(std::move(hooks)) {}

  void after_micro_batch(int rank, double seconds) const override {
    if (f().kind == "slow" && f().rank == rank)  // a machine f.amount times slower
      std::this_thread::sleep_for(std::chrono::duration<double>((f().amount - 1) * seconds));
  }
  void after_update(GPT& model, int rank, int64_t step) const override {
    if (f().kind == "flip-bit" && f().rank == rank && f().step == step) flip_lowest_bit(model, f().tensor);
    // die: the process started as that RANK (its rank may have changed since the job regrouped)
    const char* job_rank = std::getenv("RANK");
    if (f().kind == "die" && f().step == step && job_rank && std::atoi(job_rank) == f().rank) {
      std::fprintf(stderr, "NANOCHAT_TEST_FAULT: RANK=%d kills itself after the update of step %lld\n", f().rank,
                   static_cast<long long>(step));
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
  }
  void before_final_evaluation() const override {
    if (h_.fault_inject == "final-eval") fail("fault injected into the final evaluation (--fault-inject)");
  }
  void before_checkpoint_write(int rank) const override {
    if (f().kind == "write-fail" && f().rank == rank) fail("fault injected by NANOCHAT_TEST_FAULT");
  }
  // save-stall:<step>: rank 0 stops in the middle of writing that step (after its first file)
  // until the test kills it.
  void after_checkpoint_file(int rank, int64_t step, const std::string& path) const override {
    if (f().kind != "save-stall" || f().step != step || rank != 0) return;
    std::fprintf(stderr, "NANOCHAT_TEST_FAULT: stalled in the middle of a save after writing %s\n", path.c_str());
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::minutes(10));
    fail("NANOCHAT_TEST_FAULT: a stalled save was not killed");
  }

 private:
  const TestFault& f() const { return h_.fault; }
  TrainTestHooks h_;
};

}  // namespace

std::unique_ptr<FaultInjector> make_fault_injector(const TrainTestHooks& hooks) {
  return std::make_unique<HookFaults>(hooks);
}

void flip_lowest_bit(GPT& model, const std::string& tensor) {
  for (const auto& p : model.params())
    if (p.name == tensor) {
      uint32_t bits;
      std::memcpy(&bits, model.param_data() + p.offset, sizeof bits);
      bits ^= 1u;
      std::memcpy(model.param_data() + p.offset, &bits, sizeof bits);
      return;
    }
  fail("NANOCHAT_TEST_FAULT: the model has no tensor ", tensor);
}

}  // namespace nanochat
