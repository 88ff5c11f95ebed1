#pragma once
// The tracing span of one call (only with a `tracing:` block): it continues
// the client's traceparent or starts a trace, gives the backend scg's span as
// its parent, and is handed to the exporter when the call ends.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/tracing.hpp"

namespace scg::net {

class span_exporter;  // net/span_exporter.hpp

class call_span {
 public:
  /// Continues the client's trace (`traceparent`, its header if it sent one)
  /// or starts one; this call's span gets a new id.
  void start(std::optional<std::string_view> traceparent);

  /// True once started: the backend gets this span as its traceparent.
  bool started() const { return trace_.has_value(); }
  const core::trace_parent& trace() const { return *trace_; }

  /// Hands the span to `exporter` (which never blocks); `backend` is null
  /// for a call that reached none, `tenant` empty without one.
  void end(span_exporter& exporter, const std::string& method, const std::string* backend,
           const std::string& tenant, const std::string& request_id, int grpc_code);

 private:
  std::optional<core::trace_parent> trace_;   // this call's trace and span id
  std::optional<core::span_id> parent_span_;  // the client's span; absent for a root span
  std::int64_t start_ns_ = 0;
};

}  // namespace scg::net
