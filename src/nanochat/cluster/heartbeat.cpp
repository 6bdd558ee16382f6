#include "nanochat/cluster/heartbeat.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#include "nanochat/core/threads.h"

namespace nanochat::cluster {

namespace {
constexpr const char* kLeft = "left";

std::string secs(Ms t) { return fixed(static_cast<double>(t.count()) / 1000.0, 1); }
}  // namespace

Ms heartbeat_timeout() {
  const char* v = std::getenv("NANOCHAT_HEARTBEAT_TIMEOUT");
  if (!v || !*v) return Ms(10000);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s >= 0))
    fail("environment variable NANOCHAT_HEARTBEAT_TIMEOUT='", v,
         "' must be a number of seconds >= 0 (0 turns the heartbeat off)");
  return Ms(static_cast<long>(s * 1000.0));
}

Heartbeat::Heartbeat(StoreClientOptions store, const std::string& prefix, int rank, int world_size, Ms timeout,
                     OnLost on_lost)
    : opts_(std::move(store)),
      prefix_(prefix),
      rank_(rank),
      world_(world_size),
      timeout_(timeout),
      period_(std::clamp<Ms>(timeout / 10, Ms(100), Ms(1000))),
      on_lost_(std::move(on_lost)),
      last_(static_cast<size_t>(world_size)),
      since_(static_cast<size_t>(world_size), Clock::now()),
      done_(static_cast<size_t>(world_size), false) {
  opts_.identity += " (heartbeat)";
  opts_.on_retry = nullptr;
  opts_.op_timeout = std::max(period_ * 2, Ms(1000));
  client_ = std::make_unique<StoreClient>(opts_);
  client_->set(str_cat(prefix_, "hb/", rank_), "0");
  done_[static_cast<size_t>(rank_)] = true;
  thread_ = std::thread([this] {
    name_this_thread("nc-heartbeat");
    loop();
  });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  try {
    if (client_) client_->set(str_cat(prefix_, "hb/", rank_), kLeft);
  } catch (const std::exception&) {
    // the store is gone: nobody is left to report this rank
  }
}

bool Heartbeat::beat_and_watch() {
  try {
    if (!client_) {
      StoreClientOptions o = opts_;
      o.connect_timeout = Ms(0);
      o.attempt_timeout = std::max(period_, Ms(500));
      client_ = std::make_unique<StoreClient>(o);
    }
    client_->set(str_cat(prefix_, "hb/", rank_), std::to_string(++beats_));
    const auto now = Clock::now();
    // This rank was found gone by another (it was frozen, and the others went on): it is out.
    if (!self_reported_)
      if (auto why = client_->try_get(str_cat(prefix_, "lost/", rank_))) {
        self_reported_ = true;
        on_lost_(rank_, str_cat("was found gone by another rank while it did not answer: ", *why));
      }
    for (int j = 0; j < world_; ++j) {
      const size_t i = static_cast<size_t>(j);
      if (done_[i]) continue;
      if (client_->try_get(str_cat(prefix_, "dead/", j))) {  // its will: the caller names the rank
        done_[i] = true;
        on_lost_(j, kDiedWhy);
        continue;
      }
      const std::optional<std::string> v = client_->try_get(str_cat(prefix_, "hb/", j));
      if (v && *v == kLeft) {
        done_[i] = true;  // finished or stopped on purpose: not lost
        continue;
      }
      if (v && *v != last_[i]) {
        last_[i] = *v;
        since_[i] = now;
      } else if (now - since_[i] >= timeout_) {
        done_[i] = true;
        on_lost_(j,
                 str_cat("stopped answering its heartbeat for ", secs(std::chrono::duration_cast<Ms>(now - since_[i])),
                         " s (NANOCHAT_HEARTBEAT_TIMEOUT ", secs(timeout_),
                         " s): it is frozen (a machine that went to sleep, a process stopped with SIGSTOP) or "
                         "its network to node 0 is cut"));
      }
    }
    return true;
  } catch (const std::exception&) {
    client_.reset();  // reconnect next period
    return false;
  }
}

void Heartbeat::loop() {
  auto last_ok = Clock::now(), last_iter = Clock::now();
  bool store_reported = false;
  while (!stop_) {
    const auto now = Clock::now();
    // This thread itself did not run for a while (this machine slept, or was overloaded): the
    // others' counters were not watched, so start their clocks again rather than blame them.
    if (now - last_iter > timeout_ / 2) std::fill(since_.begin(), since_.end(), now);
    last_iter = now;
    if (beat_and_watch()) {
      last_ok = Clock::now();
    } else if (!store_reported && Clock::now() - last_ok >= timeout_) {
      store_reported = true;
      if (!done_[0]) {
        done_[0] = true;
        on_lost_(
            0, str_cat("cannot be reached: the job's store at ", host_port(opts_.host, opts_.port),
                       " (node 0) has not answered its heartbeat for ",
                       secs(std::chrono::duration_cast<Ms>(Clock::now() - last_ok)), " s (NANOCHAT_HEARTBEAT_TIMEOUT ",
                       secs(timeout_), " s): node 0 is frozen or stopped, or the network to it is cut"));
      }
    }
    for (Ms slept(0); slept < period_ && !stop_; slept += Ms(50)) std::this_thread::sleep_for(Ms(50));
  }
}

}  // namespace nanochat::cluster
