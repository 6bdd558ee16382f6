#include "nanochat/checkpoint/faults.h"

namespace nanochat {

const FaultInjector& no_faults() {
  static const FaultInjector none;
  return none;
}

}  // namespace nanochat
