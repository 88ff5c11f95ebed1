#include "core/metrics.hpp"

#include "core/allocator.hpp"

namespace scg::core {

const char* status_code_name(int code) {
  static const char* names[status_code_count] = {
      "OK",        "CANCELLED",      "UNKNOWN",        "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code < static_cast<int>(status_code_count) ? names[code] : "UNKNOWN";
}

void metrics::render(std::string& out) const {
  prometheus_writer w(out);
  SCG_COUNTERS(SCG_STAT_COUNTER)
  // Every reason, zeros too: a bounded set, and rate() needs the series before the first.
  w.family("local_replies_total", "Calls scg answered itself, by reason (docs/observability.md)", "counter");
  for (const auto& row : core::local_replies())
    w.sample({{"reason", row.name}}, local_replies[static_cast<std::size_t>(row.reason)].load(std::memory_order_relaxed));
  if (auto allocated = allocator().allocated_bytes)
    w.family("process_heap_allocated_bytes",
             "Bytes scg holds allocated now (the allocator's count; RSS adds its free pages)", "gauge")
        .sample(allocated());
}

metrics& global_metrics() {
  static metrics m;
  return m;
}

}  // namespace scg::core
