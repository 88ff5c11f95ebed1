#include "actors/protocol.hpp"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace scg::actors {

backend_state::backend_state(std::string n, std::string a, std::string u)
    : name(std::move(n)), address(std::move(a)), ui_url(std::move(u)) {}

backend_state::~backend_state() = default;

std::shared_ptr<backend_state> make_backend(const std::string& name, const std::string& address,
                                            const std::string& ui_url,
                                            std::size_t max_message_bytes,
                                            int connect_timeout_ms) {
  auto b = std::make_shared<backend_state>(name, address, ui_url);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  // A connection attempt gives up after connect_timeout_ms; calls that are
  // not wait-for-ready then fail with UNAVAILABLE instead of hanging.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, connect_timeout_ms);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Transport windows grow with BDP probing without any throughput gain here
  // (PERFORMANCE-NOTES.md); keep memory flat.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // A private subchannel per backend, even when two entries name one address.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  b->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  b->stub = std::make_unique<grpc::GenericStub>(b->channel);
  return b;
}

struct backend_actor_state {
  std::shared_ptr<backend_state> backend;
  static inline const char* name = "backend";
};

namespace {

constexpr auto watch_interval = std::chrono::milliseconds(250);

caf::behavior backend_actor(caf::stateful_actor<backend_actor_state>* self,
                            std::shared_ptr<backend_state> backend) {
  self->state.backend = std::move(backend);
  self->send(self, tick_atom::value);
  auto log = spdlog::get("backend");
  return {
      [=](tick_atom) {
        auto& b = *self->state.backend;
        // GetState(true) also starts a connection attempt, keeping one warm.
        auto state = b.channel->GetState(true);
        bool reachable = state != GRPC_CHANNEL_TRANSIENT_FAILURE;
        if (b.reachable.exchange(reachable) != reachable) {
          if (reachable)
            log->info("backend_reachable backend={} address={}", b.name, b.address);
          else
            log->warn("backend_unreachable backend={} address={}", b.name, b.address);
        }
        self->delayed_send(self, watch_interval, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_backend(caf::actor_system& sys, std::shared_ptr<backend_state> backend) {
  return sys.spawn(backend_actor, std::move(backend));
}

}  // namespace scg::actors
