#pragma once
// The Spark Connect RPCs by name: what the data plane routes by and the
// metrics count by. The lowest layer (core), so both can use it.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace scg::core {

/// The Spark Connect RPCs scg knows; `unknown` is any other method of the service.
enum class rpc : std::uint8_t {
  execute_plan,
  analyze_plan,
  config,
  add_artifacts,
  artifact_status,
  interrupt,
  reattach_execute,
  release_execute,
  release_session,
  fetch_error_details,
  clone_session,
  get_status,
  unknown,
};
inline constexpr std::size_t rpc_count = 13;

/// The gRPC path prefix of the service scg fronts.
inline constexpr std::string_view service_prefix = "/spark.connect.SparkConnectService/";

/// Maps a full method path ("/spark.connect.SparkConnectService/Config") to an
/// rpc; any other method of the service is `unknown`.
rpc rpc_from_path(std::string_view path);

/// The method name as Spark spells it ("ExecutePlan"), "unknown" for unknown.
std::string_view rpc_name(rpc r);

/// True for RPCs whose request and response are single messages.
bool is_unary(rpc r);

/// Index of `r` into per-rpc tables; a value out of range reads as unknown.
std::size_t rpc_index(rpc r);

}  // namespace scg::core
