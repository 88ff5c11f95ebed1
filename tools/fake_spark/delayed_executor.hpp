#pragma once
// A one-thread timer: reactors hand it their next step instead of sleeping in a
// reaction, which would stall a gRPC callback thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace scg::fake {

/// Runs callbacks on its own thread once their delay has passed.
class delayed_executor {
 public:
  using clock = std::chrono::steady_clock;

  delayed_executor() : thread_([this] { run(); }) {}
  ~delayed_executor() { stop(); }
  delayed_executor(const delayed_executor&) = delete;
  delayed_executor& operator=(const delayed_executor&) = delete;

  /// Runs fn after `delay`, or at once after fast_forward().
  void schedule(std::chrono::milliseconds delay, std::function<void()> fn) {
    std::lock_guard lock(mu_);
    queue_.push({clock::now() + delay, next_seq_++, std::move(fn)});
    wake_.notify_one();
  }

  /// Ignores delays from now on, so that delayed streams reach Finish while the
  /// server shuts down (Shutdown waits for every call to finish).
  void fast_forward() {
    std::lock_guard lock(mu_);
    fast_forward_ = true;
    wake_.notify_one();
  }

  /// Stops the thread; callbacks still queued are dropped (none remain once the
  /// server has shut down, because each belongs to an unfinished call).
  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      wake_.notify_one();
    }
    thread_.join();
  }

 private:
  struct task {
    clock::time_point at;
    uint64_t seq;  // keeps equal deadlines in scheduling order
    std::function<void()> fn;
    bool operator>(const task& other) const {
      return at != other.at ? at > other.at : seq > other.seq;
    }
  };

  void run() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (queue_.empty()) {
        wake_.wait(lock);
      } else if (fast_forward_ || queue_.top().at <= clock::now()) {
        auto fn = std::move(const_cast<task&>(queue_.top()).fn);
        queue_.pop();
        lock.unlock();
        fn();
        lock.lock();
      } else {
        // A copy: waiting unlocks, and a schedule() meanwhile may move the queue's storage.
        const auto deadline = queue_.top().at;
        wake_.wait_until(lock, deadline);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::priority_queue<task, std::vector<task>, std::greater<>> queue_;
  uint64_t next_seq_ = 0;
  bool fast_forward_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace scg::fake
