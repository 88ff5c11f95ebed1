#pragma once
// Every reason scg answers a call itself, in one table: the gRPC status it
// answers with, the counter it counts, and how its log event is named and
// levelled. net/forwarder.cpp ends calls only through it (finish_local), and
// docs/observability.md lists the same names; tests/unit/local_reply_test.cpp
// walks the table against both.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <chrono>

namespace scg::core {

struct metrics;

/// gRPC status codes by number (grpc/status.h), for the table below.
namespace grpc_code {
inline constexpr int ok = 0, cancelled = 1, unknown = 2, invalid_argument = 3, deadline_exceeded = 4,
                     resource_exhausted = 8, failed_precondition = 9, aborted = 10, unimplemented = 12, internal = 13,
                     unavailable = 14, unauthenticated = 16, permission_denied = 7;
}

/// How loud a reason's log line is: client mistakes are debug, limits doing
/// their job info, a backend or scg failing warn.
enum class reply_level : std::uint8_t { debug, info, warn };

// X(reason, gRPC code, level, retry later (RetryInfo), the specific counter or none, what it means)
#define SCG_LOCAL_REPLIES(X)                                                                                          \
  X(not_grpc, invalid_argument, debug, false, forward_invalid_argument_total,                                      \
    "the call is not gRPC (POST with content-type application/grpc)")                                              \
  X(headers_too_large, resource_exhausted, info, false, forward_oversized_total,                                    \
    "a request header block over the 64 KiB scg announces (SETTINGS_MAX_HEADER_LIST_SIZE)")                        \
  X(unknown_method, unimplemented, debug, false, forward_unimplemented_total,                                      \
    "the method is not one of the Spark Connect service")                                                          \
  X(unauthenticated, unauthenticated, info, false, auth_failures_total, "the caller's credential was refused")    \
  X(invalid_message, invalid_argument, debug, false, forward_invalid_argument_total,                               \
    "a request message does not parse, so it cannot be routed or carry the verified user")                         \
  X(unreadable_encoding, invalid_argument, debug, false, forward_invalid_argument_total,                           \
    "a compressed request message in a grpc-encoding scg cannot read")                                             \
  X(request_too_large, resource_exhausted, info, false, forward_oversized_total,                                   \
    "a request message over limits.max_message_bytes (as sent or inflated)")                                       \
  X(response_too_large, resource_exhausted, warn, false, forward_oversized_total,                                  \
    "a backend's message over limits.max_message_bytes")                                                           \
  X(rate_limited, resource_exhausted, info, true, rate_limited_total, "the tenant or user is over rate_limits")    \
  X(executions_full, resource_exhausted, info, true, executions_refused_total,                                     \
    "the tenant runs limits.max_executions executions")                                                            \
  X(execution_too_long, resource_exhausted, warn, false, executions_killed_total,                                  \
    "the execution ran past limits.max_execution_secs; it was interrupted on the backend")                         \
  X(reattach_of_killed, resource_exhausted, info, false, executions_reattach_refused_total,                        \
    "a reattach of an execution scg ended at limits.max_execution_secs")                                           \
  X(sessions_full, resource_exhausted, info, true, router_sessions_refused_total,                                  \
    "a new session of a tenant at limits.max_sessions")                                                            \
  X(sessions_shed, resource_exhausted, info, true, router_sessions_shed_total,                                     \
    "a new session while every backend scores above placement.shed_above")                                        \
  X(no_backend, unavailable, warn, false, forward_no_backend_total,                                                \
    "no backend is configured, eligible or reachable for a new session")                                          \
  X(backend_lost, failed_precondition, info, false, forward_backend_lost_total,                                    \
    "the session's backend was lost (on_backend_lost.action: fail)")                                               \
  X(operation_lost, aborted, info, false, forward_operations_lost_total,                                            \
    "the operation ran on a backend that was lost (on_backend_lost.action: replay): its results are gone")          \
  X(replay_failed, failed_precondition, warn, false, replays_failed_total,                                          \
    "the session's journal could not be replayed on its new backend; it goes on there as a new session")           \
  X(session_unreplayable, failed_precondition, info, false, replays_refused_total,                                 \
    "the session's backend was lost and its journal cannot be replayed (the reason is named)")                     \
  X(backend_unavailable, unavailable, warn, false, forward_backend_unavailable_total,                              \
    "the backend could not be reached, or its connection failed before it answered")                               \
  X(backend_broke_off, unavailable, info, false, forward_backend_broke_off_total,                                  \
    "the backend's connection failed during the call")                                                             \
  X(backend_refused_stream, unavailable, info, false, forward_backend_resets_total,                                \
    "the backend reset the stream REFUSED_STREAM: it never started it")                                            \
  X(backend_cancelled, cancelled, info, false, forward_backend_resets_total, "the backend reset the stream CANCEL") \
  X(backend_calm, resource_exhausted, info, false, forward_backend_resets_total,                                   \
    "the backend reset the stream ENHANCE_YOUR_CALM")                                                              \
  X(backend_insecure, permission_denied, warn, false, forward_backend_resets_total,                                \
    "the backend reset the stream INADEQUATE_SECURITY")                                                            \
  X(backend_reset, internal, warn, false, forward_backend_resets_total,                                            \
    "the backend reset the stream with another HTTP/2 error")                                                      \
  X(backend_no_status, internal, warn, false, forward_backend_bad_status_total,                                    \
    "the backend ended the stream without a gRPC status")                                                          \
  X(backend_bad_status, internal, warn, false, forward_backend_bad_status_total,                                   \
    "the backend's grpc-status is not a status code")                                                              \
  X(first_message_timeout, deadline_exceeded, info, false, forward_first_message_timeouts_total,                   \
    "the request's first message took longer than limits.first_message_secs")                                     \
  X(deadline, deadline_exceeded, debug, false, forward_deadline_exceeded_total,                                    \
    "the client's own deadline (grpc-timeout) passed")                                                             \
  X(buffer_shed, resource_exhausted, debug, false, buffer_shed_total,                                               \
    "the call held the most of a worker past its share of limits.buffer_mib")                                      \
  X(shutting_down, unavailable, info, false, forward_shutting_down_total,                                          \
    "the replica is shutting down (new sessions refused, calls cut at shutdown.deadline_secs)")                    \
  X(operation_unsettled, unavailable, info, false, router_operations_unsettled_total,                               \
    "an operation id no replica answered for, under a session unknown here, while the cluster settles "            \
    "(cluster.settle_ms after a member came or went, or a peer did not answer): it may live on a replica not heard yet") \
  X(route_timeout, unavailable, warn, false, router_route_timeouts_total,                                          \
    "the router gave no backend within its routing deadline (30 s): the call never reached a backend, a retry is safe")

enum class local_reason : std::uint8_t {
#define SCG_REASON_ENUM(name, code, level, retry, counter, what) name,
  SCG_LOCAL_REPLIES(SCG_REASON_ENUM)
#undef SCG_REASON_ENUM
};

/// One row of the table.
struct local_reply {
  local_reason reason;
  std::string_view name;  ///< the log event and the `reason` label
  int code;               ///< the gRPC status answered
  reply_level level;
  bool retry_later;       ///< answered with RetryInfo (limits.retry_status may turn the code into UNAVAILABLE)
  std::atomic<std::uint64_t> metrics::*counter;  ///< the specific counter it also counts
  std::string_view what;  ///< what it means, as docs/observability.md says
};

inline constexpr std::size_t local_reason_count = 0
#define SCG_REASON_COUNT(name, code, level, retry, counter, what) +1
    SCG_LOCAL_REPLIES(SCG_REASON_COUNT)
#undef SCG_REASON_COUNT
    ;

/// Every row, in enum order.
const std::array<local_reply, local_reason_count>& local_replies();

inline const local_reply& reply_of(local_reason r) { return local_replies()[static_cast<std::size_t>(r)]; }

/// Counts one local answer: scg_local_replies_total{reason} and the row's counter.
void count_local_reply(local_reason r);

/// The reason for a backend stream reset with HTTP/2 error `http2_error`
/// (RST_STREAM); `connection_failed` when the whole connection went (then
/// the reset's code says nothing of the backend's answer).
local_reason reason_of_reset(std::uint32_t http2_error, bool connection_failed);

/// The grpc-status-details-bin value for a refusal: a serialized
/// google.rpc.Status {code, message, details: [RetryInfo{retry_delay}]},
/// which Spark clients honour as a retry delay.
std::string retry_status_details(int code, std::string_view message,
                                 std::chrono::milliseconds delay);

/// A backend's grpc-status value: a decimal 0..16 and nothing else; nullopt
/// for anything other (empty, signs, spaces, junk, out of range).
std::optional<int> parse_grpc_status(std::string_view value);

}  // namespace scg::core
