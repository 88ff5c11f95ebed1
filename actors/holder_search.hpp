#pragma once
// Finding the Spark server that still holds a session scg has no binding for
// (scg's idle ttl was shorter than Spark's session timeout, or every replica
// restarted). A client that has seen its server-side session sends
// client_observed_server_side_session_id: such a session existed somewhere,
// and a fresh placement would end in INVALID_HANDLE.SESSION_CHANGED. Each
// candidate server is asked with a ReattachExecute for a random operation of
// that session, which never creates a session: OPERATION_NOT_FOUND means the
// server holds it, SESSION_NOT_FOUND (or SESSION_CHANGED) that it does not.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/backend.hpp"
#include "core/protowire.hpp"

namespace scg::actors {

/// The session to look for, as Spark keys it.
struct holder_query {
  std::string session_id;
  std::string user_id;   ///< the user id Spark sees
  std::string observed;  ///< client_observed_server_side_session_id
};

/// What one server's answer says.
enum class holder_answer { holds, not_here, unknown };

/// Reads a ReattachExecute status: `code` (gRPC) and its message.
inline holder_answer classify_holder_answer(int code, std::string_view message) {
  constexpr int internal = 13;  // Spark's errors travel as INTERNAL "[CLASS] ..."
  if (code != internal) return holder_answer::unknown;
  if (message.find("INVALID_HANDLE.OPERATION_NOT_FOUND") != std::string_view::npos) return holder_answer::holds;
  if (message.find("INVALID_HANDLE.SESSION_NOT_FOUND") != std::string_view::npos ||
      message.find("INVALID_HANDLE.SESSION_CHANGED") != std::string_view::npos ||
      message.find("INVALID_HANDLE.SESSION_CLOSED") != std::string_view::npos)
    return holder_answer::not_here;
  return holder_answer::unknown;
}

/// The ReattachExecuteRequest asking for operation `op_id` of the session
/// (session_id 1, user_context 2 { user_id 1 }, operation_id 3, observed 6).
inline std::string holder_request(const holder_query& q, std::string_view op_id) {
  namespace pw = core::protowire;
  std::string user_context, out;
  pw::put_bytes(user_context, 1, q.user_id);
  pw::put_bytes(out, 1, q.session_id);
  pw::put_bytes(out, 2, user_context);
  pw::put_bytes(out, 3, op_id);
  if (!q.observed.empty()) pw::put_bytes(out, 6, q.observed);
  return out;
}

/// Asks every backend in `candidates` at once (each with `token`, within
/// `timeout_ms`); `done` is called once, from a gRPC thread, with the first
/// that holds the session, or nullopt when none does.
void find_holder(const backend_list& backends, const std::vector<backend_index>& candidates,
                 const holder_query& q, const std::string& token, int timeout_ms,
                 std::function<void(std::optional<backend_index>)> done);

}  // namespace scg::actors
