#pragma once
// A data-plane worker: one thread, one asio io_context, the client
// connections accepted onto it and its own connection to each backend. A call
// lives on one worker from its first byte to its end and never changes
// thread; what workers share (the session table, the execution ledger, rate
// limits) is behind short locks, off the byte path.

#include <asio.hpp>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/h2/bytes.hpp"
#include "net/h2/endpoints.hpp"

namespace scg::net::h2 {

class connection;
class downstream_connection;
class upstream_connection;

class worker {
 public:
  /// `t` outlives the worker (its connections keep a reference).
  worker(int index, const tuning& t);
  ~worker();
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  int index() const { return index_; }
  asio::io_context& io() { return io_; }
  void start();
  /// Stops the loop and joins the thread (handlers not yet run are dropped).
  void stop();

  /// Runs `f` on this worker's thread, then flushes what it made dirty.
  template <class F>
  void post(F&& f) {
    asio::post(io_, [this, f = std::forward<F>(f)]() mutable {
      f();
      flush_dirty();
    });
  }

  /// Connections with frames to send; flushed by flush_dirty().
  void mark_dirty(std::shared_ptr<connection> c) { dirty_.push_back(std::move(c)); }
  /// Flushes every dirty connection; call at the end of each handler.
  void flush_dirty();

  /// Where the next socket read lands: at least `min_free` bytes of the
  /// worker's current chunk (a new chunk once slices hold the old one full).
  char* read_space(std::size_t& free);
  chunk* read_chunk() { return chunk_; }
  void read_done(std::size_t n) { used_ += n; }

  /// This worker's connection to the backend at `index` / `address`,
  /// connecting a new one when there is none or the last one failed or is
  /// going away.
  std::shared_ptr<upstream_connection> upstream(std::size_t index, const std::string& address,
                                                int connect_timeout_ms);

  /// Client connections, oldest first (for draining at shutdown, evicting).
  std::vector<std::weak_ptr<downstream_connection>>& downstreams() { return downstreams_; }
  const tuning& tune() const { return tune_; }

  /// Calls on this worker from their first header to their end.
  std::atomic<std::int64_t> calls{0};
  /// Bytes of chunks alive that this worker made: read buffers and the call
  /// data in them, held messages (net/h2/bytes.hpp counts them).
  std::atomic<std::int64_t> buffered{0};

  /// After reading: when the worker holds more than its budget, waiting
  /// calls give up the read buffers they share, then those holding the most
  /// are ended until it is within budget again.
  void check_budget() {
    if (buffered.load(std::memory_order_relaxed) > tune_.worker_buffer_bytes) relieve();
  }

 private:
  void relieve();
  /// Twice a second: every connection's timeouts and keepalive.
  void tick();

  const int index_;
  const tuning& tune_;
  asio::io_context io_{1};
  asio::steady_timer ticker_{io_};
  std::int64_t reported_buffered_ = 0;  // what buffered_bytes holds of ours
  std::chrono::steady_clock::time_point last_relief_{};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::vector<std::shared_ptr<connection>> dirty_;
  chunk* chunk_ = nullptr;
  std::size_t used_ = 0;
  std::vector<std::shared_ptr<upstream_connection>> upstreams_;
  std::vector<std::weak_ptr<downstream_connection>> downstreams_;
};

}  // namespace scg::net::h2
