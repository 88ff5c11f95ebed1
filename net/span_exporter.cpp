#include "net/span_exporter.hpp"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/address.hpp"
#include "core/metrics.hpp"
#include "net/net_stats.hpp"

namespace scg::net {
namespace {

/// The "main" logger; spdlog's default where it is not set up (unit tests).
spdlog::logger& main_log() {
  auto log = spdlog::get("main");
  return log ? *log : *spdlog::default_logger_raw();
}

}  // namespace

using core::bump;
using core::global_metrics;
using core::otlp_json;
using core::parse_url;

span_exporter::span_exporter(config::tracing cfg) : cfg_(std::move(cfg)) {
  // The config validated the endpoint; without one every export fails, counted.
  if (const auto u = parse_url(cfg_.otlp_endpoint)) {
    origin_ = u->origin();
    path_ = u->path;
  }
  worker_ = std::thread([this] { run(); });
}

span_exporter::~span_exporter() {
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
  }
  wake_.notify_one();
  worker_.join();
}

bool span_exporter::submit(span&& s) {
  bool full_batch;
  {
    std::lock_guard lock{mu_};
    if (stopping_ || queue_.size() >= static_cast<std::size_t>(cfg_.queue_capacity)) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      bump(global_net_stats().tracing_spans_dropped_total);
      return false;
    }
    queue_.push_back(std::move(s));
    full_batch = queue_.size() == static_cast<std::size_t>(cfg_.batch_size);
  }
  if (full_batch) wake_.notify_one();
  return true;
}

void span_exporter::run() {
  httplib::Client http(origin_);
  const auto timeout = std::chrono::milliseconds(cfg_.timeout_ms);
  const auto secs = static_cast<time_t>(cfg_.timeout_ms / 1000);
  const auto usecs = static_cast<time_t>(cfg_.timeout_ms % 1000 * 1000);
  http.set_connection_timeout(secs, usecs);
  http.set_read_timeout(secs, usecs);
  http.set_write_timeout(secs, usecs);
  http.set_keep_alive(true);

  const auto batch_size = static_cast<std::size_t>(cfg_.batch_size);
  std::optional<std::chrono::steady_clock::time_point> drain_until;  // set at shutdown
  std::vector<span> batch;
  for (;;) {
    {
      std::unique_lock lock{mu_};
      wake_.wait_for(lock, std::chrono::milliseconds(cfg_.flush_interval_ms),
                     [&] { return stopping_ || queue_.size() >= batch_size; });
      if (stopping_ && !drain_until) drain_until = std::chrono::steady_clock::now() + timeout;
      // Shutdown sends what is queued while the collector answers and time is left.
      if (drain_until && (failing_ || std::chrono::steady_clock::now() >= *drain_until)) {
        dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
        bump(global_net_stats().tracing_spans_dropped_total, queue_.size());
        queue_.clear();
      }
      if (queue_.empty()) {
        if (stopping_) return;
        continue;
      }
      const auto n = std::min(batch_size, queue_.size());
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
      queue_.erase(queue_.begin(), queue_.begin() + n);
    }
    auto res = http.Post(path_.c_str(), otlp_json(batch, cfg_.service_name), "application/json");
    std::optional<std::string> failure;
    if (!res)
      failure = httplib::to_string(res.error());
    else if (res->status / 100 != 2)
      failure = "HTTP " + std::to_string(res->status);
    record(batch.size(), failure);
    batch.clear();
  }
}

void span_exporter::record(std::size_t n, const std::optional<std::string>& failure) {
  if (!failure) {
    exported_.fetch_add(n, std::memory_order_relaxed);
    bump(global_net_stats().tracing_spans_exported_total, n);
    if (failing_) main_log().info("tracing_export_recovered endpoint={}", cfg_.otlp_endpoint);
    failing_ = false;
    return;
  }
  failed_.fetch_add(n, std::memory_order_relaxed);
  bump(global_net_stats().tracing_export_failures_total, n);
  if (!failing_)
    main_log().warn("tracing_export_failing endpoint={} reason=\"{}\" action=\"spans are dropped until it answers\"",
                    cfg_.otlp_endpoint, *failure);
  failing_ = true;
}

}  // namespace scg::net
