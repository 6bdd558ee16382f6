#include "nanochat/serve/pool.h"

#include <algorithm>
#include <exception>

#include "nanochat/core/error.h"

namespace nanochat::serve {

bool Job::next(JobEvent& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(m_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
  out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void Job::post(JobEvent e) {
  {
    std::lock_guard<std::mutex> lk(m_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

WorkerPool::WorkerPool(int workers, int queue_capacity, const BackendFactory& make)
    : queue_capacity_(std::max(0, queue_capacity)) {
  if (workers < 1) fail("--workers is ", workers, "; it must be at least 1");
  running_.resize(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i, make] { loop(i, make); });
  std::unique_lock<std::mutex> lk(m_);
  ready_cv_.wait(lk, [&] { return ready_ + failed_ == workers; });
  if (failed_ > 0) {
    const std::string err = first_error_;
    stopping_ = true;
    lk.unlock();
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    throw Error(err);
  }
}

WorkerPool::~WorkerPool() {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
    left.swap(queue_);
    for (auto& j : running_)  // answers being generated stop at their next token
      if (j) j->cancelled_ = true;
  }
  cv_.notify_all();
  for (auto& j : left) {
    j->cancelled_ = true;
    j->post(JobEvent::failed(503, "server_shutting_down", "the server is shutting down"));
    j->post(JobEvent::of(JobEvent::Kind::Finished));
  }
  for (auto& t : threads_) t.join();
}

std::shared_ptr<Job> WorkerPool::submit(Job::Work work, Clock::time_point deadline) {
  auto job = std::make_shared<Job>(std::move(work), deadline);
  {
    std::lock_guard<std::mutex> lk(m_);
    const int idle = static_cast<int>(threads_.size()) - busy_;
    // A job may wait only if a worker is free for it or the queue has room.
    if (stopping_ || static_cast<int>(queue_.size()) >= idle + queue_capacity_) {
      ++rejected_;
      return nullptr;
    }
    queue_.push_back(job);
  }
  cv_.notify_one();
  return job;
}

void WorkerPool::cancel(const std::shared_ptr<Job>& job) {
  job->cancelled_ = true;
  std::lock_guard<std::mutex> lk(m_);
  auto it = std::find(queue_.begin(), queue_.end(), job);
  if (it != queue_.end()) queue_.erase(it);
}

int WorkerPool::position(const Job& job) const {
  std::lock_guard<std::mutex> lk(m_);
  for (size_t i = 0; i < queue_.size(); ++i)
    if (queue_[i].get() == &job) return static_cast<int>(i) + 1;
  return 0;
}

WorkerPool::Stats WorkerPool::stats() const {
  std::lock_guard<std::mutex> lk(m_);
  Stats s;
  s.workers = static_cast<int>(threads_.size());
  s.busy = busy_;
  s.queued = static_cast<int>(queue_.size());
  s.queue_capacity = queue_capacity_;
  s.served = served_;
  s.rejected = rejected_;
  return s;
}

void WorkerPool::loop(int index, const BackendFactory& make) {
  std::unique_ptr<Backend> backend;
  try {
    backend = make(index);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(m_);
    if (failed_++ == 0) first_error_ = str_cat("worker ", index, ": ", e.what());
    ready_cv_.notify_all();
    return;
  }
  {
    std::lock_guard<std::mutex> lk(m_);
    ++ready_;
  }
  ready_cv_.notify_all();
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      running_[static_cast<size_t>(index)] = job;
    }
    job->started_ = true;
    if (Clock::now() >= job->deadline()) {
      job->post(JobEvent::failed(503, "timeout",
                                 "the request waited for a free worker until its time limit; try again later"));
    } else {
      try {
        job->work_(*backend, *job);
      } catch (const ApiError& e) {
        job->post(JobEvent::failed(e.status, e.type, e.what()));
      } catch (const std::exception& e) {
        job->post(JobEvent::failed(500, "server_error", str_cat("generation failed: ", e.what())));
      }
    }
    job->post(JobEvent::of(JobEvent::Kind::Finished));
    std::lock_guard<std::mutex> lk(m_);
    running_[static_cast<size_t>(index)].reset();
    --busy_;
    ++served_;
  }
}

}  // namespace nanochat::serve
