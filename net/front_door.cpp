#include "net/front_door.hpp"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <stdexcept>

namespace scg::net {

struct front_door::service final : grpc::CallbackGenericService {
  explicit service(forward_context& fx) : fx(fx) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return start_forward(fx, ctx);
  }
  forward_context& fx;
};

front_door::front_door(const config::gateway& cfg, forward_context& fx)
    : service_(std::make_unique<service>(fx)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.bind_addr, grpc::InsecureServerCredentials(), &port_);
  const int max = static_cast<int>(cfg.limits.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max);
  builder.SetMaxSendMessageSize(max);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Spark clients keep connections open for hours and may ping.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterCallbackGenericService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0)
    throw std::runtime_error("cannot listen for gRPC on bind_addr " + cfg.bind_addr);
}

front_door::~front_door() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

void front_door::shutdown(std::chrono::system_clock::time_point deadline) {
  server_->Shutdown(deadline);
  server_->Wait();
}

}  // namespace scg::net
