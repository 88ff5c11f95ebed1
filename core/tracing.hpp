#pragma once
// Tracing: W3C trace context (traceparent), spans and their OTLP/HTTP JSON
// body. net/span_exporter.hpp sends them to a collector; off unless the
// `tracing:` block is configured (docs/configuration.md).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

}  // namespace scg::core
