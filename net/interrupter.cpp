// The interrupt client (net/interrupter.hpp): one asynchronous unary call on
// the backend's generic stub; its state is freed when the answer comes.
#include "net/interrupter.hpp"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/metrics.hpp"
#include "core/protowire.hpp"
#include "core/rpc.hpp"

namespace scg::net {

void send_interrupt(actors::backend_state& backend, const std::string& session, const std::string& user,
                    const std::string& op_id, const std::string& token, const std::string& request_id) {
  namespace pw = core::protowire;
  struct call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  std::string user_context, body;
  pw::put_bytes(user_context, 1, user);
  pw::put_bytes(body, 1, session);
  pw::put_bytes(body, 2, user_context);
  pw::put_uint(body, 4, 3);  // INTERRUPT_TYPE_OPERATION_ID
  pw::put_bytes(body, 6, op_id);
  auto* c = new call;
  grpc::Slice slice(body);
  c->request = grpc::ByteBuffer(&slice, 1);
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c->ctx.AddMetadata("x-request-id", request_id);
  if (!token.empty()) c->ctx.AddMetadata("authorization", "Bearer " + token);
  backend.stub->UnaryCall(&c->ctx, std::string(core::service_prefix) + "Interrupt", grpc::StubOptions(), &c->request,
                          &c->response, [c, op_id, name = backend.name](grpc::Status s) {
                            if (!s.ok()) {
                              static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
                              log->warn("interrupt_failed backend={} operation_id={} code={} reason=\"{}\"", name,
                                        op_id, core::status_code_name(s.error_code()), s.error_message());
                            }
                            delete c;
                          });
}

}  // namespace scg::net
