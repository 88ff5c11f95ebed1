// The forwarder in one process, no child processes: a real data-plane worker
// and a forward_context wired as app/gateway.cpp wires a replica's (a real
// router on an in-process CAF actor system) take a client connection over a
// socketpair, handed to the worker as front_door hands it an accepted socket.
// The client speaks raw HTTP/2 (tests/raw_h2.hpp, header blocks decoded with
// nghttp2's HPACK inflater); the backend is a grpc++ server in this process.
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <grpcpp/grpcpp.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/router.hpp"
#include "app/gateway.hpp"
#include "auth/rate_limit.hpp"
#include "core/clock.hpp"
#include "core/local_reply.hpp"
#include "core/session_key.hpp"
#include "core/usage.hpp"
#include "net/forwarder.hpp"
#include "net/h2/endpoints.hpp"
#include "net/h2/grpc_frames.hpp"
#include "net/h2/worker.hpp"
#include "net/net_stats.hpp"
#include "tests/integration/harness.hpp"
#include "tests/raw_h2.hpp"

namespace sc = spark::connect;
namespace rh = scg::test::raw_h2;
using namespace scg::test;
using namespace scg;

namespace {

using header_fields = std::vector<std::pair<std::string, std::string>>;

/// The backend: Config and ExecutePlan, keeping the bytes of every answer it
/// gives. It counts the calls the tests make; scg's own health probes
/// (Config for user scg-health-probe, actors/backend_actor.cpp) are answered
/// and left out.
class spark_backend final : public sc::SparkConnectService::Service {
 public:
  static constexpr int stream_length = 5;

  grpc::Status Config(grpc::ServerContext* ctx, const sc::ConfigRequest* req, sc::ConfigResponse* resp) override {
    if (req->user_context().user_id() == "scg-health-probe") return grpc::Status::OK;
    configs.fetch_add(1);
    resp->set_session_id(req->session_id());
    resp->set_server_side_session_id("inproc-server-session");
    auto* pair = resp->add_pairs();
    pair->set_key("spark.sql.shuffle.partitions");
    pair->set_value("7");
    resp->add_warnings("answered in process");
    ctx->AddInitialMetadata("x-inproc-backend", "spark-a");
    ctx->AddTrailingMetadata("x-inproc-trailer", "kept");
    std::lock_guard lock{mu_};
    config_sent_ = resp->SerializeAsString();
    return grpc::Status::OK;
  }

  /// Batches of 200, 400, 600 and 800 bytes, then result_complete: scg reads
  /// the first and those up to 512 bytes whole, the others pass as they come.
  grpc::Status ExecutePlan(grpc::ServerContext*, const sc::ExecutePlanRequest* req,
                           grpc::ServerWriter<sc::ExecutePlanResponse>* out) override {
    executions.fetch_add(1);
    for (int i = 0; i < stream_length; ++i) {
      sc::ExecutePlanResponse r;
      r.set_session_id(req->session_id());
      r.set_operation_id(req->operation_id());
      r.set_response_id("response-" + std::to_string(i));
      if (i + 1 < stream_length) {
        r.mutable_arrow_batch()->set_row_count(i + 1);
        r.mutable_arrow_batch()->set_data(std::string(200 * (i + 1), static_cast<char>('a' + i)));
      } else {
        r.mutable_result_complete();
      }
      {
        std::lock_guard lock{mu_};
        execute_sent_.push_back(r.SerializeAsString());
      }
      if (!out->Write(r)) return grpc::Status::CANCELLED;
    }
    return grpc::Status::OK;
  }

  std::string config_sent() const {
    std::lock_guard lock{mu_};
    return config_sent_;
  }
  std::vector<std::string> execute_sent() const {
    std::lock_guard lock{mu_};
    return execute_sent_;
  }

  std::atomic<int> configs{0}, executions{0};

 private:
  mutable std::mutex mu_;
  std::string config_sent_;
  std::vector<std::string> execute_sent_;
};

/// The backend's server on a free loopback port; shut down at destruction.
struct backend_server {
  spark_backend service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  backend_server() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~backend_server() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

/// What came back on one stream.
struct h2_reply {
  header_fields headers, trailers;
  std::vector<std::string> messages;  ///< the gRPC message bodies, in order
  bool ended = false;                 ///< the stream's END_STREAM arrived
  bool reset = false;                 ///< a RST_STREAM (or GOAWAY) came first

  static std::string find(const header_fields& fields, const std::string& name) {
    for (const auto& [n, v] : fields)
      if (n == name) return v;
    return {};
  }
  std::string header(const std::string& name) const { return find(headers, name); }
  std::string trailer(const std::string& name) const { return find(trailers, name); }
  /// grpc-status: in the trailers, or in the headers of a trailers-only answer; -1 when none.
  int status() const {
    auto s = trailers.empty() ? header("grpc-status") : trailer("grpc-status");
    return s.empty() ? -1 : std::stoi(s);
  }
  std::string message() const {
    return net::h2::percent_decode(trailers.empty() ? header("grpc-message") : trailer("grpc-message"));
  }
};

/// The client's end of the socketpair: raw_h2's frames out; back, the frames
/// of one call at a time, their header blocks decoded by nghttp2's HPACK
/// inflater (raw_h2 only encodes, and scg's answers use its dynamic table).
class h2_client {
 public:
  explicit h2_client(int fd) : conn_(rh::connection::adopt_fd{fd}) { nghttp2_hd_inflate_new(&hpack_); }
  ~h2_client() { nghttp2_hd_inflate_del(hpack_); }
  h2_client(const h2_client&) = delete;
  h2_client& operator=(const h2_client&) = delete;

  rh::connection& conn() { return conn_; }

  /// One call of `method` with `bodies` as its messages (the last ends the
  /// request), read until its end or `timeout`.
  h2_reply call(const std::string& method, const std::vector<std::string>& bodies,
                std::chrono::milliseconds timeout = 5s) {
    const auto stream = next_stream_;
    next_stream_ += 2;
    std::string data;
    for (const auto& b : bodies) data += rh::grpc_message(b);
    h2_reply reply;
    if (!conn_.send(rh::headers_frame(stream, rh::grpc_request_block(std::string(core::service_prefix) + method),
                                      true, false) +
                    rh::data_frame(stream, data, true)))
      return reply;
    read_reply(stream, reply, timeout);
    return reply;
  }

 private:
  void read_reply(std::uint32_t stream, h2_reply& reply, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::string body, block;  // the stream's DATA; a header block until its END_HEADERS
    std::uint32_t block_stream = 0;
    bool block_ends_stream = false, have_headers = false;
    while (auto f = conn_.read_frame(until - std::chrono::steady_clock::now())) {
      std::string_view p = f->payload;
      switch (f->type) {
        case rh::frame_type::headers:
          block.clear();
          block_stream = f->stream;
          block_ends_stream = f->flag_bits & rh::flags::end_stream;
          p = unpadded(p, f->flag_bits, true);
          [[fallthrough]];
        case rh::frame_type::continuation: {
          block.append(p);
          if (!(f->flag_bits & rh::flags::end_headers)) break;
          auto fields = decode(block);  // every block, in order: the HPACK table depends on them all
          if (block_stream != stream) break;
          (have_headers ? reply.trailers : reply.headers) = std::move(fields);
          have_headers = true;
          if (block_ends_stream) return finish(body, reply, true);
          break;
        }
        case rh::frame_type::data:
          // The connection window back at once (the stream's 64 KiB is plenty here).
          if (!f->payload.empty()) conn_.send(rh::window_update_frame(0, static_cast<std::uint32_t>(f->payload.size())));
          if (f->stream != stream) break;
          body.append(unpadded(p, f->flag_bits, false));
          if (f->flag_bits & rh::flags::end_stream) return finish(body, reply, true);
          break;
        case rh::frame_type::rst_stream:
          if (f->stream != stream) break;
          reply.reset = true;
          return finish(body, reply, false);
        case rh::frame_type::goaway:
          reply.reset = true;
          return finish(body, reply, false);
        case rh::frame_type::settings:
          if (!(f->flag_bits & rh::flags::ack)) conn_.send(rh::settings_ack_frame());
          break;
        case rh::frame_type::ping:
          if (!(f->flag_bits & rh::flags::ack)) conn_.send(rh::frame(rh::frame_type::ping, rh::flags::ack, 0, p));
          break;
        default:
          break;
      }
    }
    finish(body, reply, false);  // the time ran out, or the connection closed
  }

  /// The frame's payload less its padding (and a HEADERS frame's priority).
  static std::string_view unpadded(std::string_view p, std::uint8_t flag_bits, bool headers) {
    std::size_t pad = 0;
    if ((flag_bits & 0x8) && !p.empty()) {  // PADDED
      pad = static_cast<std::uint8_t>(p[0]);
      p.remove_prefix(1);
    }
    if (headers && (flag_bits & 0x20)) p.remove_prefix(std::min<std::size_t>(5, p.size()));  // PRIORITY
    return p.substr(0, p.size() - std::min(pad, p.size()));
  }

  /// The stream's DATA split into gRPC messages (5-byte prefix, then the body).
  static void finish(const std::string& body, h2_reply& reply, bool ended) {
    reply.ended = ended;
    for (std::size_t at = 0; at + 5 <= body.size();) {
      const std::size_t n = rh::get_u32(body, at + 1);
      reply.messages.push_back(body.substr(at + 5, n));
      at += 5 + n;
    }
  }

  header_fields decode(const std::string& block) {
    header_fields out;
    auto* in = reinterpret_cast<const std::uint8_t*>(block.data());
    std::size_t left = block.size();
    for (;;) {
      nghttp2_nv nv;
      int flags = 0;
      const auto n = nghttp2_hd_inflate_hd2(hpack_, &nv, &flags, in, left, 1);
      if (n < 0) {
        FAIL_CHECK("HPACK: " << nghttp2_strerror(static_cast<int>(n)));
        return out;
      }
      in += n;
      left -= static_cast<std::size_t>(n);
      if (flags & NGHTTP2_HD_INFLATE_EMIT)
        out.emplace_back(std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                         std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen));
      if (flags & NGHTTP2_HD_INFLATE_FINAL) {
        nghttp2_hd_inflate_end_headers(hpack_);
        return out;
      }
      if (!(flags & NGHTTP2_HD_INFLATE_EMIT) && left == 0) return out;
    }
  }

  rh::connection conn_;
  nghttp2_hd_inflater* hpack_ = nullptr;
  std::uint32_t next_stream_ = 1;
};

/// One scg data path in this process in front of `list` (name, address),
/// wired as app/gateway.cpp wires a replica: the router on its own actor
/// system, one worker, and a client connected to it over a socketpair.
/// Members are declared in the order run_gateway declares them, so they go
/// in its order too; the destructor first stops what it stops explicitly.
struct inproc_scg {
  config::gateway cfg;
  caf::actor_system_config caf_cfg;
  std::unique_ptr<caf::actor_system> sys;
  actors::backend_list backends;
  std::shared_ptr<actors::session_table> table =
      std::make_shared<actors::session_table>(actors::backend_list::capacity);
  app::secrets secrets;
  auth::rate_limiter limiter{cfg.security.rate_limits};
  net::forward_context fx;
  std::unique_ptr<actors::router> router;
  net::h2::tuning tune;
  std::unique_ptr<net::h2::worker> worker;
  net::h2::downstream_connection::call_factory make;
  std::unique_ptr<h2_client> client;

  explicit inproc_scg(const std::vector<std::pair<std::string, std::string>>& list) {
    app::setup_logging({config::log_level::warn, core::log_format::text});
    caf_cfg.set("scheduler.max-threads", 2);
    caf_cfg.set("scheduler.policy", caf::atom("sharing"));
    sys = std::make_unique<caf::actor_system>(caf_cfg);
    sys->await_actors_before_shutdown(false);
    for (const auto& [name, address] : list)
      backends.push_back(actors::make_backend(name, address, "", cfg.limits.max_message_bytes,
                                              cfg.limits.connect_timeout_ms));
    auto read = app::read_secrets(cfg);
    REQUIRE(read.ok());
    secrets = std::move(read.value());

    fx.auth = secrets.authenticator.get();
    fx.limiter = &limiter;
    fx.backend_tokens = secrets.backend_tokens;
    REQUIRE(net::configure(fx, cfg).empty());  // as app/gateway.cpp does
    router = std::make_unique<actors::router>(*sys, cfg, table, backends, fx.backend_tokens.own_calls());
    fx.backends = backends;
    fx.table = table;
    fx.router = router.get();
    
    // front_door's tuning_of for one worker; the process's connection gauge is left alone.
    tune.handshake_timeout = std::chrono::seconds(cfg.limits.handshake_timeout_secs);
    tune.idle_timeout = std::chrono::seconds(cfg.limits.idle_connection_secs);
    tune.first_message_timeout = std::chrono::seconds(cfg.limits.first_message_secs);
    tune.keepalive_interval = std::chrono::seconds(cfg.keepalive.interval_secs);
    tune.keepalive_timeout = std::chrono::seconds(cfg.keepalive.timeout_secs);
    tune.worker_buffer_bytes = std::int64_t{cfg.limits.buffer_mib} << 20;
    worker = std::make_unique<net::h2::worker>(0, tune);
    worker->start();
    make = [this](net::h2::downstream_connection& d, std::int32_t stream) { return net::start_forward(fx, d, stream); };

    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    // As front_door's open(): the socket becomes a client connection on its
    // worker's thread. asio takes any stream socket's descriptor; TCP_NODELAY
    // fails on this one, and start() ignores that.
    worker->post([this, fd = fds[0]] {
      asio::ip::tcp::socket s(worker->io());
      asio::error_code ec;
      s.assign(asio::ip::tcp::v4(), fd, ec);
      if (ec) {
        ::close(fd);
        return;
      }
      auto c = std::make_shared<net::h2::downstream_connection>(*worker, std::move(s), make, tune);
      worker->downstreams().push_back(c);
      c->start();
    });
    client = std::make_unique<h2_client>(fds[1]);
    REQUIRE(client->conn().handshake());
  }

  /// run_gateway's order: the client goes (its calls end), the worker
  /// stops, the router answers what it holds, then all is destroyed.
  ~inproc_scg() {
    client.reset();
    if (worker) {
      eventually([this] { return worker->calls.load() == 0; }, 5s);
      worker->stop();
    }
    if (router) router->stop();
    worker.reset();
    router.reset();
  }

  /// Calls on the worker, from their first header to their end.
  auto calls_open() {
    return watch("calls open on the worker", [this] { return static_cast<long>(worker->calls.load()); });
  }
};

/// scg_forward_rpcs_total{rpc, code}.
long rpcs_counted(core::rpc r, int code) {
  return static_cast<long>(
      net::global_net_stats().rpcs[static_cast<std::size_t>(r)][static_cast<std::size_t>(code)].load());
}

/// How many more calls of `r` ended with `code` than `before`.
auto rpcs_since(core::rpc r, int code, long before) {
  return watch(std::string(core::rpc_name(r)) + " calls counted with code " + std::to_string(code),
               [=] { return rpcs_counted(r, code) - before; });
}

sc::ConfigRequest config_request(const std::string& session) {
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user("ada");
  req.set_operation("an operation scg never parses");
  return req;
}

}  // namespace

TEST_CASE("in process: a Config goes through the forwarder to the backend and back byte for byte",
          "[integration][inproc]") {
  backend_server backend;
  REQUIRE(backend.port > 0);
  inproc_scg scg({{"spark-a", backend.address()}});
  auto& stats = net::global_net_stats();
  const auto ok_before = rpcs_counted(core::rpc::config, core::grpc_code::ok);
  const auto request_bytes = stats.forward_request_bytes_total.load();
  const auto response_bytes = stats.forward_response_bytes_total.load();

  const auto body = config_request(uuid_of("inproc-config")).SerializeAsString();
  auto reply = scg.client->call("Config", {body});
  REQUIRE(reply.ended);
  CHECK(reply.status() == core::grpc_code::ok);
  CHECK(reply.header(":status") == "200");
  // The backend's headers, message and trailers, as it sent them.
  CHECK(reply.header("x-inproc-backend") == "spark-a");
  CHECK(reply.trailer("x-inproc-trailer") == "kept");
  REQUIRE(reply.messages.size() == 1);
  CHECK(reply.messages[0] == backend.service.config_sent());
  CHECK(backend.service.configs.load() == 1);

  CHECK(eventually(rpcs_since(core::rpc::config, core::grpc_code::ok, ok_before) == 1L, 5s));
  CHECK(stats.forward_request_bytes_total.load() - request_bytes == body.size());
  CHECK(stats.forward_response_bytes_total.load() - response_bytes == reply.messages[0].size());
  // The router placed the new session: its binding is in the table.
  CHECK(scg.table->session_backend(core::session_key{"default", "ada", uuid_of("inproc-config")}.str()) ==
        actors::backend_index{0});
  CHECK(eventually(scg.calls_open() == 0L, 5s));
}

TEST_CASE("in process: an ExecutePlan's responses are relayed in order, every one unchanged",
          "[integration][inproc]") {
  backend_server backend;
  REQUIRE(backend.port > 0);
  inproc_scg scg({{"spark-a", backend.address()}});
  const auto ok_before = rpcs_counted(core::rpc::execute_plan, core::grpc_code::ok);

  const auto op = uuid_of("inproc-operation");
  auto reply = scg.client->call("ExecutePlan", {execute(uuid_of("inproc-stream"), "ada", op).SerializeAsString()});
  REQUIRE(reply.ended);
  CHECK(reply.status() == core::grpc_code::ok);
  CHECK(reply.messages.size() == std::size_t{spark_backend::stream_length});
  CHECK(reply.messages == backend.service.execute_sent());
  for (std::size_t i = 0; i < reply.messages.size(); ++i) {
    sc::ExecutePlanResponse r;
    REQUIRE(r.ParseFromString(reply.messages[i]));
    CHECK(r.response_id() == "response-" + std::to_string(i));
  }
  CHECK(backend.service.executions.load() == 1);

  CHECK(eventually(rpcs_since(core::rpc::execute_plan, core::grpc_code::ok, ok_before) == 1L, 5s));
  // The operation is indexed to the backend that runs it (a reattach would follow it).
  CHECK(scg.table->op_backend(op) == actors::backend_index{0});
  CHECK(eventually(scg.calls_open() == 0L, 5s));
}

TEST_CASE("in process: a first message that is not protobuf is answered INVALID_ARGUMENT by scg itself",
          "[integration][inproc]") {
  backend_server backend;
  REQUIRE(backend.port > 0);
  inproc_scg scg({{"spark-a", backend.address()}});
  const auto invalid_before = rpcs_counted(core::rpc::config, core::grpc_code::invalid_argument);

  // Field 1, length-delimited, its length a varint that never ends.
  auto reply = scg.client->call("Config", {std::string("\x0a\xff\xff", 3)});
  REQUIRE(reply.ended);
  CHECK(reply.status() == core::grpc_code::invalid_argument);
  CHECK_THAT(reply.message(), Catch::Contains("request is not a valid Config message"));
  CHECK(reply.trailers.empty());  // trailers-only: scg answered before any backend did
  CHECK(reply.messages.empty());
  CHECK(eventually(rpcs_since(core::rpc::config, core::grpc_code::invalid_argument, invalid_before) == 1L, 5s));
  // Neither the router nor the backend heard of it.
  CHECK(scg.table->session_count() == 0u);
  CHECK(scg.backends[0]->calls_total.load() == 0u);
  CHECK(backend.service.configs.load() == 0);

  // The same connection carries on, and the backend counts what reaches it.
  auto good = scg.client->call("Config", {config_request(uuid_of("inproc-after")).SerializeAsString()});
  CHECK(good.status() == core::grpc_code::ok);
  CHECK(backend.service.configs.load() == 1);
  CHECK(eventually(scg.calls_open() == 0L, 5s));
}

TEST_CASE("in process: a backend that is not listening is answered UNAVAILABLE naming it",
          "[integration][inproc]") {
  const auto dead = "127.0.0.1:" + std::to_string(unused_port());
  inproc_scg scg({{"spark-dead", dead}});
  const auto unavailable_before = rpcs_counted(core::rpc::config, core::grpc_code::unavailable);
  // The session is bound already (as after an earlier call), so the call goes
  // straight to its backend: a new session would ask the router, whose
  // backend actor may have marked the backend unreachable by then.
  const auto session = uuid_of("inproc-dead");
  scg.table->bind_session(core::session_key{"default", "ada", session}.str(), 0, core::now_ms());

  auto reply = scg.client->call("Config", {config_request(session).SerializeAsString()});
  REQUIRE(reply.ended);
  CHECK(reply.status() == core::grpc_code::unavailable);
  CHECK_THAT(reply.message(), Catch::Contains("scg: backend spark-dead (" + dead + ") is unavailable"));
  CHECK(reply.messages.empty());
  CHECK(eventually(rpcs_since(core::rpc::config, core::grpc_code::unavailable, unavailable_before) == 1L, 5s));
  CHECK(scg.backends[0]->unavailable_total.load() == 1u);
  CHECK(eventually(scg.calls_open() == 0L, 5s));
}
