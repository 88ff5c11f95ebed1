#include "core/rpc.hpp"

#include <algorithm>
#include <array>

namespace scg::core {

namespace {

constexpr std::array<std::string_view, rpc_count> method_names = {
    "ExecutePlan",  "AnalyzePlan",     "Config",         "AddArtifacts",   "ArtifactStatus",
    "Interrupt",    "ReattachExecute", "ReleaseExecute", "ReleaseSession", "FetchErrorDetails",
    "CloneSession", "GetStatus",       "unknown",
};

}  // namespace

std::size_t rpc_index(rpc r) {
  // An out-of-range value (a bad cast) reads as unknown rather than past the tables.
  return std::min(static_cast<std::size_t>(r), rpc_count - 1);
}

rpc rpc_from_path(std::string_view path) {
  if (path.substr(0, service_prefix.size()) != service_prefix) return rpc::unknown;
  path.remove_prefix(service_prefix.size());
  for (std::size_t i = 0; i + 1 < rpc_count; ++i)
    if (path == method_names[i]) return static_cast<rpc>(i);
  return rpc::unknown;
}

std::string_view rpc_name(rpc r) { return method_names[rpc_index(r)]; }

bool is_unary(rpc r) {
  switch (r) {
    case rpc::execute_plan:
    case rpc::reattach_execute:
    case rpc::add_artifacts:
    case rpc::unknown:
      return false;
    default:
      return r < rpc::unknown;
  }
}

}  // namespace scg::core
