#pragma once
// The worker pool of `nanochat chat-web` (docs/architecture.md 10): N threads, each owning one
// Backend (its own model and KV cache), take jobs from one bounded FIFO queue. A job that finds
// every worker busy and the queue full is refused at once (the server answers 429), so memory and
// waiting are bounded by workers + queue. A job talks to the HTTP thread that submitted it through
// its own event queue; either side may cancel it, and a cancelled job leaves the queue at once or
// stops at its next token.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/serve/backend.h"

namespace nanochat::serve {

using Clock = std::chrono::steady_clock;

/// One message from a worker to the HTTP thread of a job.
struct JobEvent {
  enum class Kind { Started, Piece, RowDone, Failed, Finished } kind = Kind::Piece;
  int row = 0;
  std::string text;                   ///< Piece: answer text; Failed: the error message
  RowEnd end;                         ///< RowDone
  int prompt_tokens = 0;              ///< Started
  int generated = 0;                  ///< Piece: tokens generated so far by the job, every row
  int status = 500;                   ///< Failed: the HTTP status it maps to
  std::string type = "server_error";  ///< Failed: the OpenAI error type

  static JobEvent of(Kind k, int row = 0, std::string text = {}) {
    JobEvent e;
    e.kind = k;
    e.row = row;
    e.text = std::move(text);
    return e;
  }
  static JobEvent failed(int status, std::string type, std::string message) {
    JobEvent e = of(Kind::Failed, 0, std::move(message));
    e.status = status;
    e.type = std::move(type);
    return e;
  }
};

class Job {
 public:
  using Work = std::function<void(Backend&, Job&)>;
  Job(Work work, Clock::time_point deadline) : work_(std::move(work)), deadline_(deadline) {}

  /// HTTP thread: the next event, waiting at most `timeout`; false on timeout.
  bool next(JobEvent& out, std::chrono::milliseconds timeout);
  /// Worker: posts an event (wakes the HTTP thread).
  void post(JobEvent e);
  bool cancelled() const { return cancelled_.load(); }
  Clock::time_point deadline() const { return deadline_; }
  bool started() const { return started_.load(); }

 private:
  friend class WorkerPool;
  Work work_;
  Clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> started_{false};
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
};

class WorkerPool {
 public:
  /// Starts `workers` (>= 1) threads; each calls make(index) and keeps that backend. Returns when
  /// all have one; throws the first backend's nanochat::Error (after stopping the others) if any
  /// failed. queue_capacity >= 0 jobs may wait.
  WorkerPool(int workers, int queue_capacity, const BackendFactory& make);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues a job, or returns nullptr when every worker is busy and the queue is full. A job whose
  /// deadline has passed when a worker takes it gets a Failed event (503) instead of running.
  std::shared_ptr<Job> submit(Job::Work work, Clock::time_point deadline);
  /// Cancels a job: removes it from the queue if it waits there (its slot frees at once), else
  /// marks it so that its work stops at the next token.
  void cancel(const std::shared_ptr<Job>& job);
  /// 1-based place of a waiting job in the queue; 0 once a worker has it.
  int position(const Job& job) const;

  struct Stats {
    int workers = 0, busy = 0, queued = 0, queue_capacity = 0;
    int64_t served = 0, rejected = 0;
  };
  Stats stats() const;

 private:
  void loop(int index, const BackendFactory& make);

  int queue_capacity_;
  mutable std::mutex m_;
  std::condition_variable cv_, ready_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> running_;  // per worker, the job it runs (null when idle)
  std::vector<std::thread> threads_;
  int busy_ = 0, ready_ = 0, failed_ = 0;
  int64_t served_ = 0, rejected_ = 0;
  std::string first_error_;
  bool stopping_ = false;
};

}  // namespace nanochat::serve
