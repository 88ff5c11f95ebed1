#pragma once
// The wire scanner: reads the few routing fields of Spark Connect messages
// straight from protobuf wire bytes, without parsing plans or building
// messages. Field numbers: docs/spark-wire.md.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/protowire.hpp"
#include "core/rpc.hpp"

namespace scg::net {

// The rpc enum and its names live in core/rpc.hpp (metrics count by rpc);
// the data plane names them net::rpc.
using core::is_unary;
using core::rpc;
using core::rpc_count;
using core::rpc_from_path;
using core::rpc_name;
using core::service_prefix;

/// A message as the worker holds it: one or more contiguous byte segments.
using segment = core::protowire::segment;
using segments = std::vector<segment>;

/// What an ExecutePlan asks of its server, as far as scg's execution limits
/// care: to compute, or to wait for something else to happen. A waiting
/// execution holds no executors while it waits, so it is exempt from
/// limits.max_executions and max_execution_secs (docs/multitenancy.md).
/// Read from ExecutePlanRequest.plan (3) → Plan.command (2) → Command's
/// oneof (commands.proto); the comments give each kind's field path.
enum class plan_kind : std::uint8_t {
  compute,                ///< a relation, every other command, a compressed or unread plan
  listener_bus,           ///< streaming_query_listener_bus_command (11): listener events stream
  await_termination,      ///< streaming_query_command (7) → await_termination (9)
  process_all_available,  ///< streaming_query_command (7) → process_all_available (6)
  await_any_termination,  ///< streaming_query_manager_command (9) → await_any_termination (3)
  pipeline_signals,       ///< pipeline_command (19) → get_query_function_execution_signal_stream (7)
};

/// True for the kinds that wait rather than compute.
inline bool waits(plan_kind k) { return k != plan_kind::compute; }
/// snake_case name of `k`.
std::string_view plan_kind_name(plan_kind k);

/// Routing fields of a request. Empty strings when absent.
struct request_fields {
  std::string session_id;
  std::string user_id;                 ///< user_context.user_id
  std::string operation_id;            ///< ExecutePlan 6, Reattach/ReleaseExecute 3, Interrupt 6
  std::string observed_server_session; ///< client_observed_server_side_session_id
  std::string new_session_id;          ///< CloneSession 4
  std::uint64_t interrupt_type = 0;    ///< Interrupt 4
  bool release_all = false;            ///< ReleaseExecute 5 present
  plan_kind plan = plan_kind::compute; ///< ExecutePlan 3, classified (never fails a scan)
};

/// Routing fields of a response. Empty strings when absent.
struct response_fields {
  std::string session_id;
  std::string server_side_session_id;
  std::string operation_id;           ///< ExecutePlanResponse 12, ReleaseExecuteResponse 2
  std::string new_session_id;         ///< CloneSessionResponse 3
  std::string new_server_side_session_id;  ///< CloneSessionResponse 4
  bool result_complete = false;       ///< ExecutePlanResponse 14 present
};

/// Outcome of a scan: `ok`, or why the bytes are not a valid message.
struct scan_result {
  bool ok = true;
  std::string reason;  ///< e.g. "truncated length-delimited field 3 at byte 17"
  explicit operator bool() const { return ok; }
};

/// Longest routing id scg accepts (session, user and operation ids).
inline constexpr std::size_t max_id_bytes = 1024;

/// Walks the whole top-level message (and user_context) checking the wire
/// format, and fills `out` with the fields `r`'s request carries. For
/// `unknown`, only fields 1 (session_id) and 2 (user_context) are read.
/// An ExecutePlan's plan is classified by walking only the few nested fields
/// plan_kind names (everything else skipped by its length); bytes inside the
/// plan that are not what it expects make it `compute`, never a failure.
/// Fails on malformed wire data or a routing id longer than max_id_bytes.
scan_result scan_request(rpc r, const segments& msg, request_fields& out);

/// Like scan_request, for a response of `r`.
scan_result scan_response(rpc r, const segments& msg, response_fields& out);

/// The field of `r`'s request that carries client_observed_server_side_session_id (0: none).
std::uint32_t observed_field(rpc r);
/// The field of `r`'s response that carries server_side_session_id (0: none).
std::uint32_t server_side_field(rpc r);
/// Overwrites in place the first top-level field `number` of `msg` whose
/// value is `from` with `to`, of the same length (ids are UUIDs); false when
/// there is none. The segments' bytes must be the caller's to write.
bool overwrite_id(const segments& msg, std::uint32_t number, std::string_view from, std::string_view to);

/// Reads ExecutePlanResponse.arrow_batch.row_count (field 2, then 1) from a
/// message body fed in pieces as it passes: every other field is skipped
/// by its length without touching its bytes, and once the count is read (or
/// the bytes are not what it expects: a group, bad varints) the rest of the
/// message costs nothing. Never fails a call: what it cannot read counts 0.
class arrow_rows_reader {
 public:
  /// A new message body of `length` bytes starts.
  void start(std::uint64_t length);
  void feed(const std::uint8_t* data, std::size_t size);
  /// The row_count read from this message so far; 0 when none.
  std::uint64_t rows() const { return rows_; }

 private:
  enum class state : std::uint8_t { tag, length, value, skip, done };
  void on_varint(std::uint64_t v);
  state state_ = state::done;
  bool nested_ = false;          // inside arrow_batch
  std::uint32_t field_ = 0, type_ = 0;
  std::uint64_t varint_ = 0;
  unsigned shift_ = 0;
  std::uint64_t pos_ = 0, end_ = 0, nested_end_ = 0, skip_ = 0;
  std::uint64_t rows_ = 0;
};

}  // namespace scg::net
