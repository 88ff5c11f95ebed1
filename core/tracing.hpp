#pragma once
// Tracing: W3C trace context (traceparent) and a span exporter that batches
// finished spans to an OpenTelemetry collector by OTLP/HTTP with JSON bodies.
// Off unless the `tracing:` block is configured (docs/configuration.md).

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace scg::core {

using trace_id = std::array<std::uint8_t, 16>;
using span_id = std::array<std::uint8_t, 8>;

/// The fields of a traceparent header: which trace, which span is the parent
/// of the receiver's, and the trace flags (bit 0: sampled).
struct trace_parent {
  trace_id trace{};
  span_id span{};
  std::uint8_t flags = 1;
};

/// Reads "00-<32 hex>-<16 hex>-<2 hex>" (lowercase). Version 00 must be exactly
/// that; a later version (not ff) is read by its first four fields, as the W3C
/// spec asks. nullopt for anything else, and for all-zero trace or span ids.
std::optional<trace_parent> parse_traceparent(std::string_view header);

/// "00-<trace>-<span>-<flags>", lowercase hex.
std::string format_traceparent(const trace_parent& tp);

/// Random non-zero ids from a per-thread generator seeded once from the OS:
/// unique enough for traces, not secrets.
trace_id new_trace_id();
span_id new_span_id();

/// Lowercase hex of `bytes`.
std::string to_hex(const std::uint8_t* bytes, std::size_t n);
template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& id) {
  return to_hex(id.data(), N);
}

/// One finished span (kind SERVER: scg's handling of one RPC).
struct span {
  trace_id trace{};
  span_id id{};
  std::optional<span_id> parent;  ///< absent: a root span
  std::string name;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  std::vector<std::pair<std::string, std::string>> attributes;  ///< string-valued
  int grpc_status_code = 0;  ///< exported as the int attribute rpc.grpc.status_code
  bool error = false;        ///< status ERROR; otherwise OK
};

/// The OTLP/HTTP JSON body (ExportTraceServiceRequest) for `spans` of `service_name`.
std::string otlp_json(const std::vector<span>& spans, const std::string& service_name);

/// Now, in nanoseconds since the Unix epoch.
std::int64_t unix_now_ns();

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

}  // namespace scg::core
