#pragma once
// The span exporter: finished spans (core/tracing.hpp) batched to an
// OpenTelemetry collector by OTLP/HTTP with JSON bodies, from a thread of
// its own.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "config/config.hpp"
#include "core/tracing.hpp"

namespace scg::net {

using core::span;

/// Exports finished spans from one background thread: batches of up to
/// batch_size, sent when a batch is full or flush_interval_ms passed. submit()
/// never blocks on the network; a full queue drops the span (counted). A failing
/// collector costs its batches (counted, logged once per change on "main"),
/// never an RPC. The destructor sends what is queued, within timeout_ms, and joins.
class span_exporter {
 public:
  explicit span_exporter(config::tracing cfg);
  ~span_exporter();
  span_exporter(const span_exporter&) = delete;
  span_exporter& operator=(const span_exporter&) = delete;

  /// Queues `s` for export; false (and counted as dropped) when the queue is full.
  bool submit(span&& s);

  /// Spans the collector accepted, dropped at a full queue (or at shutdown),
  /// and lost to failed export requests; also in scg_tracing_* metrics.
  std::uint64_t exported() const { return exported_.load(std::memory_order_relaxed); }
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  std::uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  void run();
  /// Counts and logs the outcome of one export request of `n` spans.
  void record(std::size_t n, const std::optional<std::string>& failure);

  const config::tracing cfg_;
  std::string origin_;  ///< "http(s)://host:port"
  std::string path_;    ///< "/v1/traces"

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<span> queue_;
  bool stopping_ = false;

  std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> failed_{0};
  bool failing_ = false;  ///< last export failed (worker thread only)
  std::thread worker_;
};

}  // namespace scg::net
