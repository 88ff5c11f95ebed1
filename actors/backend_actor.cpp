#include "actors/protocol.hpp"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "actors/health.hpp"
#include "core/protowire.hpp"
#include "core/replicated_key.hpp"

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
  // (docs/performance.md, "Levers applied"); keep memory flat.
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
  backend_index index = 0;
  std::shared_ptr<session_table> table;
  router_actor router;
  config::health health;
  std::unique_ptr<health_streak> streak;
  static inline const char* name = "backend";
};

namespace {

constexpr auto watch_interval = std::chrono::milliseconds(250);
constexpr auto rest_interval = std::chrono::seconds(1);

/// Out of the configured set with nothing bound here: no reason to connect.
bool resting(const backend_actor_state& st) {
  return st.backend->removed.load() && st.table->sessions_on(st.index) == 0;
}

/// The probe: Config get_option with no keys, for a fixed session of a
/// fixed user, as raw protobuf (session_id = 1, user_context = 2
/// { user_id = 1 }, operation = 3 { get_option = 4 {} }): a valid request,
/// so the driver logs nothing, and the cheapest one Spark answers. Any
/// answer, even an error status, shows the server alive.
const std::string& probe_request() {
  static const std::string bytes = [] {
    namespace pw = core::protowire;
    std::string user_context, operation, out;
    pw::put_bytes(user_context, 1, "scg-health-probe");
    pw::put_bytes(operation, 4, "");
    pw::put_bytes(out, 1, "00000000-5c90-4000-8000-000000000001");
    pw::put_bytes(out, 2, user_context);
    pw::put_bytes(out, 3, operation);
    return out;
  }();
  return bytes;
}

/// Sends one probe; its outcome comes back to `actor` as (probed_atom, answered).
void send_probe(backend_state& b, int timeout_ms, const std::string& token, backend_actor actor) {
  struct call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  auto* c = new call;
  grpc::Slice slice(probe_request());
  c->request = grpc::ByteBuffer(&slice, 1);
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!token.empty()) c->ctx.AddMetadata("authorization", "Bearer " + token);
  b.stub->UnaryCall(&c->ctx, "/spark.connect.SparkConnectService/Config", grpc::StubOptions(),
                    &c->request, &c->response, [c, actor](grpc::Status s) {
                      bool answered = s.error_code() != grpc::StatusCode::UNAVAILABLE &&
                                      s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
                      caf::anon_send(actor, probed_atom::value, answered);
                      delete c;
                    });
}

/// Down since when (for on_backend_lost), or 0 while fine: at every change of
/// reachability (the tick) or health (a probe), so that a backend back up and
/// down again soon after counts from its new fall.
void note_down(backend_state& b) {
  if (!down(b)) {
    b.down_since_ms = 0;
  } else if (b.down_since_ms.load() == 0) {
    b.down_since_ms = now_ms();
  }
}

using self_ptr = backend_actor::stateful_pointer<backend_actor_state>;

backend_actor::behavior_type backend_behavior(self_ptr self, std::shared_ptr<backend_state> backend,
                                              backend_index index, std::shared_ptr<session_table> table,
                                              config::health health, router_actor router, std::string token) {
  self->state.backend = std::move(backend);
  self->state.index = index;
  self->state.table = std::move(table);
  self->state.router = std::move(router);
  self->state.health = health;
  self->state.streak = std::make_unique<health_streak>(health.failures, health.successes);
  self->send(self, tick_atom::value);
  self->send(self, probe_atom::value);
  auto log = spdlog::get("backend");
  return {
      [=](tick_atom) {
        if (resting(self->state)) return self->delayed_send(self, rest_interval, tick_atom::value);
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
        note_down(b);
        self->delayed_send(self, watch_interval, tick_atom::value);
      },
      [=](probed_atom, bool answered) {
        auto& st = self->state;
        switch (st.streak->record(answered)) {
          case health_streak::change::became_unhealthy:
            st.backend->healthy = false;
            self->send(st.router, health_atom::value, st.backend->name, false);
            log->warn("backend_unhealthy backend={} failed_probes={}", st.backend->name,
                      st.health.failures);
            break;
          case health_streak::change::became_healthy:
            st.backend->healthy = true;
            self->send(st.router, health_atom::value, st.backend->name, true);
            log->info("backend_healthy backend={}", st.backend->name);
            break;
          case health_streak::change::none:
            break;
        }
        note_down(*st.backend);
        // The next probe after this one's outcome: never two in flight.
        self->delayed_send(self, std::chrono::milliseconds(st.health.interval_ms), probe_atom::value);
      },
      [=](probe_atom) {
        // Only the backend's owner probes; the others get its verdict replicated.
        auto& st = self->state;
        if (resting(st))
          return self->delayed_send(self, std::chrono::milliseconds(st.health.interval_ms), probe_atom::value);
        ask_owner(self, st.router, core::make_key(core::key_kind::health, st.backend->name), [=](bool mine) {
          if (mine) return send_probe(*self->state.backend, self->state.health.timeout_ms, token, self);
          self->delayed_send(self, std::chrono::milliseconds(self->state.health.interval_ms), probe_atom::value);
        });
      },
  };
}

}  // namespace

backend_actor spawn_backend(caf::actor_system& sys, std::shared_ptr<backend_state> backend, backend_index index,
                            std::shared_ptr<session_table> table, const config::health& health, router_actor router,
                            std::string token) {
  return sys.spawn(backend_behavior, std::move(backend), index, std::move(table), health, std::move(router),
                   std::move(token));
}

}  // namespace scg::actors
