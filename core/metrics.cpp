#include "core/metrics.hpp"

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
  for (std::size_t r = 0; r < net::rpc_count; ++r) {
    for (std::size_t c = 0; c < status_code_count; ++c) {
      auto n = rpcs[r][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      out += "scg_forward_rpcs_total{rpc=\"";
      out += net::rpc_name(static_cast<net::rpc>(r));
      out += "\",code=\"";
      out += status_code_name(static_cast<int>(c));
      out += "\"} " + std::to_string(n) + "\n";
    }
  }
  header(out, "forward_rpc_duration_seconds", "Time from a call's arrival to its end, by Spark Connect method",
         "histogram");
  for (std::size_t r = 0; r < net::rpc_count; ++r) {
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b <= duration_bounds_us.size(); ++b) cumulative += durations[r][b].load(std::memory_order_relaxed);
    if (cumulative == 0) continue;  // a method never called adds no series
    const std::string rpc(net::rpc_name(static_cast<net::rpc>(r)));
    std::uint64_t running = 0;
    for (std::size_t b = 0; b <= duration_bounds_us.size(); ++b) {
      running += durations[r][b].load(std::memory_order_relaxed);
      const std::string le = b < duration_bounds_us.size()
                                 ? std::to_string(static_cast<double>(duration_bounds_us[b]) / 1e6)
                                 : std::string("+Inf");
      out += "scg_forward_rpc_duration_seconds_bucket{rpc=\"" + rpc + "\",le=\"" + le + "\"} " +
             std::to_string(running) + "\n";
    }
    out += "scg_forward_rpc_duration_seconds_sum{rpc=\"" + rpc + "\"} " +
           std::to_string(static_cast<double>(duration_sum_us[r].load(std::memory_order_relaxed)) / 1e6) + "\n";
    out += "scg_forward_rpc_duration_seconds_count{rpc=\"" + rpc + "\"} " + std::to_string(running) + "\n";
  }
}

metrics& global_metrics() {
  static metrics m;
  return m;
}

}  // namespace scg::core
