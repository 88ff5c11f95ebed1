#pragma once
// The forwarder: one gRPC reactor type carries every Spark Connect RPC, known
// or not, from a client to the backend that holds its session and back.

#include <atomic>
#include <cstdint>
#include <memory>

#include "actors/backend.hpp"
#include "actors/router.hpp"
#include "actors/session_table.hpp"

namespace grpc {
class ByteBuffer;
class GenericCallbackServerContext;
template <class Request, class Response>
class ServerBidiReactor;
}  // namespace grpc

namespace scg::net {

/// What every forwarded call shares; outlives all calls.
struct forward_context {
  actors::backend_list backends;
  std::shared_ptr<actors::session_table> table;
  const actors::router* router = nullptr;
  std::atomic<std::uint64_t> cursor{0};  ///< spreads calls that carry no session
  std::int64_t lost_after_ms = 30000;    ///< on_backend_lost.after_secs
  bool rebind_lost = true;               ///< on_backend_lost.action == rebind
};

/// Starts forwarding the call behind `ctx`; the reactor deletes itself when
/// both the client and the backend side are done.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* start_forward(forward_context& fx,
                                              grpc::GenericCallbackServerContext* ctx);

}  // namespace scg::net
