#pragma once
// The interrupts scg sends itself: an execution past its tenant's
// max_execution_secs is stopped with an InterruptRequest on the backend's own
// gRPC channel (not the worker's HTTP/2 connection), fire and forget.

#include <string>

#include "actors/backend.hpp"

namespace scg::net {

/// Tells `backend` to interrupt operation `op_id` of `session` (InterruptRequest
/// with interrupt_type OPERATION_ID, as `user`, with backend token `token`
/// when there is one); the answer is only logged.
void send_interrupt(actors::backend_state& backend, const std::string& session, const std::string& user,
                    const std::string& op_id, const std::string& token, const std::string& request_id);

}  // namespace scg::net
