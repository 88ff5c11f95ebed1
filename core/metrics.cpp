#include "core/metrics.hpp"

#include "core/allocator.hpp"

namespace scg::core {

namespace {
void header(std::string& out, const char* name, const char* help, const char* type) {
  out += "# HELP scg_";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE scg_";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}
}  // namespace

const char* status_code_name(int code) {
  static const char* names[status_code_count] = {
      "OK",        "CANCELLED",      "UNKNOWN",        "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code < static_cast<int>(status_code_count) ? names[code] : "UNKNOWN";
}

void metrics::render(std::string& out) const {
#define SCG_RENDER(name, help, type)                                   \
  header(out, #name, help, type);                                      \
  out += "scg_" #name " " + std::to_string(name.load(std::memory_order_relaxed)) + "\n";
#define SCG_COUNTER(name, help) SCG_RENDER(name, help, "counter")
#define SCG_GAUGE(name, help) SCG_RENDER(name, help, "gauge")
  SCG_COUNTERS(SCG_COUNTER)
  SCG_GAUGES(SCG_GAUGE)
#undef SCG_COUNTER
#undef SCG_GAUGE
#undef SCG_RENDER
  header(out, "forward_rpcs_total", "Finished calls by Spark Connect method and status code",
         "counter");
  for (std::size_t r = 0; r < rpc_count; ++r) {
    for (std::size_t c = 0; c < status_code_count; ++c) {
      auto n = rpcs[r][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      out += "scg_forward_rpcs_total{rpc=\"";
      out += rpc_name(static_cast<rpc>(r));
      out += "\",code=\"";
      out += status_code_name(static_cast<int>(c));
      out += "\"} " + std::to_string(n) + "\n";
    }
  }
  header(out, "local_replies_total", "Calls scg answered itself, by reason (docs/observability.md)", "counter");
  for (const auto& row : core::local_replies()) {
    // Every reason, zeros too: a bounded set, and rate() needs the series before the first.
    auto n = local_replies[static_cast<std::size_t>(row.reason)].load(std::memory_order_relaxed);
    out += "scg_local_replies_total{reason=\"";
    out += row.name;
    out += "\"} " + std::to_string(n) + "\n";
  }
  header(out, "forward_rpc_duration_seconds", "Time from a call's arrival to its end, by Spark Connect method",
         "histogram");
  for (std::size_t r = 0; r < rpc_count; ++r)
    durations[r].render(out, "forward_rpc_duration_seconds",
                        "rpc=\"" + std::string(rpc_name(static_cast<rpc>(r))) + "\"", duration_bounds_us,
                        true);  // a method never called adds no series
  if (auto allocated = allocator().allocated_bytes) {
    header(out, "process_heap_allocated_bytes", "Bytes scg holds allocated now (the allocator's count; RSS adds its free pages)",
           "gauge");
    out += "scg_process_heap_allocated_bytes " + std::to_string(allocated()) + "\n";
  }
  header(out, "cluster_replication_delay_seconds",
         "Time from a write at its replica to its arrival here, for entries pushed as deltas", "histogram");
  replication_delay.render(out, "cluster_replication_delay_seconds", "", replication_bounds_us, false);
  header(out, "router_decision_seconds",
         "Time a call waited for the router to place its new or rebound session", "histogram");
  router_decision.render(out, "router_decision_seconds", "", decision_bounds_us, false);
  header(out, "router_owner_answer_seconds",
         "Time the key's owner, another replica, took to answer a placement question (or the question to time out)",
         "histogram");
  owner_answer.render(out, "router_owner_answer_seconds", "", decision_bounds_us, false);
  header(out, "cluster_refresh_pass_seconds",
         "Time of one refresh pass of the cluster actor over its table (touch bindings in use, expire the rest)",
         "histogram");
  refresh_pass.render(out, "cluster_refresh_pass_seconds", "", decision_bounds_us, false);
}

template <std::size_t N>
void histogram<N>::render(std::string& out, const std::string& name, const std::string& labels,
                          const std::array<std::uint64_t, N>& bounds, bool skip_empty) const {
  std::uint64_t total = 0;
  for (const auto& c : counts) total += c.load(std::memory_order_relaxed);
  if (total == 0 && skip_empty) return;
  const std::string prefix = labels.empty() ? "" : labels + ",";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  std::uint64_t running = 0;
  for (std::size_t b = 0; b <= N; ++b) {
    running += counts[b].load(std::memory_order_relaxed);
    const std::string le = b < N ? std::to_string(static_cast<double>(bounds[b]) / 1e6) : std::string("+Inf");
    out += "scg_" + name + "_bucket{" + prefix + "le=\"" + le + "\"} " + std::to_string(running) + "\n";
  }
  out += "scg_" + name + "_sum" + braces + " " +
         std::to_string(static_cast<double>(sum_us.load(std::memory_order_relaxed)) / 1e6) + "\n";
  out += "scg_" + name + "_count" + braces + " " + std::to_string(running) + "\n";
}

metrics& global_metrics() {
  static metrics m;
  return m;
}

}  // namespace scg::core
