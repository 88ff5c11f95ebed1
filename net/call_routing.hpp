#pragma once
// Steps 3 and 4 of a call (net/forwarder.cpp) as plain functions: which
// backend the tables say (choose_backend over the session table and the
// operation index), a backend from the tenant's pool for a call without a
// session, and the headers its backend stream opens with.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "net/admission.hpp"
#include "net/call_policies.hpp"
#include "net/call_span.hpp"
#include "net/choose_backend.hpp"
#include "net/h2/connection.hpp"

namespace scg::net {

/// choose_backend for the call's routing fields and session key, over the
/// tables as they are now (a lookup refreshes what it finds; a backend down
/// for on_backend_lost.after_secs is lost). `op_asked`: the cluster was
/// asked for the call's operation id and knew nothing.
route_decision decide_route(forward_context& fx, const call_facts& facts, bool op_asked);

/// A call without a session: the next eligible backend `tenant` may use
/// (tenants.pools), round robin; failing that, one of them anyway (it
/// answers for itself); nullopt when the pool names no configured backend.
std::optional<actors::backend_index> any_backend(forward_context& fx, const std::string& tenant);

/// Why choose_backend refused: no backend at all, the session's is lost
/// (on_backend_lost.action: fail), or the operation died with its lost
/// backend (replay); the status names the backend.
refusal route_refusal(const forward_context& fx, const call_facts& facts, const route_decision& d);

/// The request headers of the call's backend stream: the client's metadata
/// (less HTTP/2 hop headers, the ones scg sets and the client's credential),
/// x-request-id, scg's span as traceparent, scg's backend token and the
/// remaining grpc-timeout. They refer to the strings of the call and of this
/// object (nghttp2 copies them when the stream is submitted), so it stays put.
class backend_request {
 public:
  /// `deadline`: the call's (or its execution limit, `limited`: the backend
  /// then gets a second more, so that scg's timer cuts it first and says why).
  backend_request(const h2::header_list& metadata, const std::string& method, const std::string& content_type,
                  const std::string& address, const std::string& request_id, const call_span& span,
                  const std::string& token, const std::optional<std::chrono::steady_clock::time_point>& deadline,
                  bool limited);
  backend_request(const backend_request&) = delete;
  backend_request& operator=(const backend_request&) = delete;

  const std::vector<h2::header_ref>& headers() const { return headers_; }

 private:
  std::string traceparent_, authorization_, timeout_;
  std::vector<h2::header_ref> headers_;
};

}  // namespace scg::net
