#pragma once
// Heartbeat: finds a peer that is frozen, dead or cut off in seconds, where a collective would wait
// out its timeout (docs/architecture.md 7.12). A frozen process (a laptop whose lid closed, SIGSTOP)
// keeps its TCP connections open, so neither Gloo nor the store's last will notices it; only the
// absence of its beats does.
//
// Every rank runs one thread with its own connection to the job's store (never the connection the
// rendezvous and the failure diagnosis use, whose long requests would delay a beat). Each period
// (timeout / 10, between 100 ms and 1 s) it sets `hb/<rank>` to a new counter and reads every
// other rank's counter and its last will `dead/<rank>`. A peer is lost when its counter has not
// changed for `timeout` (frozen or cut off) or its will fired (died); a peer that said goodbye
// (`hb/<rank>` = "left", set by the destructor) is never reported. A rank that another rank found
// gone (key `lost/<rank>`, set by the communicator: it was frozen and woke up) reports itself, so
// that it stops at once. When the store itself does not
// answer for `timeout`, node 0 (which hosts it) is reported as lost under rank 0. Each lost rank is
// reported once, from the heartbeat's thread.
//
// Timeout: NANOCHAT_HEARTBEAT_TIMEOUT seconds (default 10; 0 turns the heartbeat off), also set by
// `nanochat run --heartbeat-timeout`.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/cluster/net.h"
#include "nanochat/cluster/store.h"

namespace nanochat::cluster {

/// Why a rank whose last will fired (`dead/<rank>`) is lost, after its description: the same words
/// whichever thread finds it first, the heartbeat or the failure diagnosis of the operation it broke
/// (gloo_failure.cpp), so that a rank's error does not depend on which one ran first.
inline constexpr const char* kDiedWhy = "has died (killed or crashed: its connection to the store dropped)";

/// The heartbeat's timeout: NANOCHAT_HEARTBEAT_TIMEOUT seconds (default 10 s); 0 s = no heartbeat.
/// Throws nanochat::Error naming the variable when it is not a number >= 0.
Ms heartbeat_timeout();

class Heartbeat {
 public:
  /// Called once per lost rank: `rank` (job rank), `why` ("stopped answering its heartbeat for
  /// 10.4 s (NANOCHAT_HEARTBEAT_TIMEOUT 10 s): ...", kDiedWhy). Runs on the heartbeat thread;
  /// must not block for long.
  using OnLost = std::function<void(int rank, const std::string& why)>;

  /// Connects its own client with `store` (the job's host, port and token; `identity` is
  /// extended), under key prefix `prefix` ("nc/g<k>/"), and starts beating as `rank` of
  /// `world_size`. Throws nanochat::Error when the store cannot be reached.
  Heartbeat(StoreClientOptions store, const std::string& prefix, int rank, int world_size, Ms timeout, OnLost on_lost);
  /// Says goodbye (`hb/<rank>` = "left", so the others do not report this rank) and stops.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  Ms timeout() const { return timeout_; }

 private:
  void loop();
  bool beat_and_watch();  // one period's work; false when the store did not answer

  StoreClientOptions opts_;
  std::string prefix_;
  const int rank_, world_;
  const Ms timeout_, period_;
  OnLost on_lost_;
  std::unique_ptr<StoreClient> client_;
  std::vector<std::string> last_;         // each rank's counter as last read
  std::vector<Clock::time_point> since_;  // when it last changed
  std::vector<bool> done_;                // reported or left
  int64_t beats_ = 0;
  bool self_reported_ = false;  // this rank's own `lost/<rank>` key was seen
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nanochat::cluster
