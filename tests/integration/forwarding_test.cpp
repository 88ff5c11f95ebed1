// One replica in front of real scg-fake-spark backends: every RPC passes
// verbatim and keeps its session's backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "google_rpc.pb.h"
#include "auth/rewrite.hpp"
#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

/// Three fake backends behind one scg.
struct three_backends {
  temp_dir dir;
  fake_spark a = start_fake(dir, "fake-a");
  fake_spark b = start_fake(dir, "fake-b");
  fake_spark c = start_fake(dir, "fake-c");
  gateway gw = start_gateway(dir, gateway_yaml({&a, &b, &c}));
  std::unique_ptr<sc::SparkConnectService::Stub> stub = stub_to(gw.grpc_port);

  const fake_spark& by_name(const std::string& name) const {
    return name == a.name ? a : name == b.name ? b : c;
  }
};

std::string backend_of(const grpc::ClientContext& ctx) {
  auto name = header(ctx, "x-fake-backend");
  return name.empty() ? header(ctx, "x-fake-backend", true) : name;
}

sc::ConfigResponse config(sc::SparkConnectService::Stub& stub, const std::string& session,
                          const std::string& user_id, std::string* backend = nullptr,
                          grpc::Status* status = nullptr) {
  grpc::ClientContext ctx;
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  sc::ConfigResponse resp;
  auto s = stub.Config(&ctx, req, &resp);
  if (backend) *backend = backend_of(ctx);
  if (status) *status = s;
  return resp;
}

/// A backend's entry in the gateway's /api/v1/backends (null when absent).
nlohmann::json listed(const gateway& gw, const std::string& backend) {
  auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second, nullptr, false);
  if (!j.is_discarded())
    for (const auto& be : j["backends"])
      if (be["name"] == backend) return be;
  return nullptr;
}
bool listed_healthy(const gateway& gw, const std::string& backend) {
  auto be = listed(gw, backend);
  return be.is_object() && be["healthy"].get<bool>();
}
bool listed_draining(const gateway& gw, const std::string& backend) {
  auto be = listed(gw, backend);
  return be.is_object() && be["draining"].get<bool>();
}

/// The backend the gateway's /api/v1/sessions lists for `session`, empty when none.
std::string listed_backend(const gateway& gw, const std::string& session) {
  auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/sessions?session=" + session).second, nullptr,
                                 false);
  if (j.is_discarded()) return "";
  for (const auto& s : j["sessions"])
    if (s["session_id"] == session) return s["backend"].get<std::string>();
  return "";
}

struct stream_result {
  grpc::Status status;
  std::string backend;
  std::vector<sc::ExecutePlanResponse> responses;
  bool complete() const { return !responses.empty() && responses.back().has_result_complete(); }
};

template <class Request>
stream_result read_stream(
    std::unique_ptr<grpc::ClientReader<sc::ExecutePlanResponse>> (sc::SparkConnectService::Stub::*call)(
        grpc::ClientContext*, const Request&),
    sc::SparkConnectService::Stub& stub, const Request& req,
    const std::map<std::string, std::string>& md = {}) {
  grpc::ClientContext ctx;
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  stream_result out;
  auto reader = (stub.*call)(&ctx, req);
  sc::ExecutePlanResponse r;
  while (reader->Read(&r)) out.responses.push_back(r);
  out.status = reader->Finish();
  out.backend = backend_of(ctx);
  return out;
}

sc::ExecutePlanRequest execute(const std::string& session, const std::string& user_id,
                               const std::string& op_id = "") {
  sc::ExecutePlanRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  req.set_plan("plan bytes scg never parses");
  if (!op_id.empty()) req.set_operation_id(op_id);
  return req;
}

sc::ReattachExecuteRequest reattach(const std::string& session, const std::string& user_id,
                                    const std::string& op_id, const std::string& last) {
  sc::ReattachExecuteRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  req.set_operation_id(op_id);
  if (!last.empty()) req.set_last_response_id(last);
  return req;
}

}  // namespace

TEST_CASE("every known rpc passes with its metadata, trailers and session ids intact",
          "[integration]") {
  three_backends env;
  auto& stub = *env.stub;
  const std::string session = "8d3f0c52-0000-4000-8000-000000000001";
  std::string bound;
  config(stub, session, "alice", &bound);
  REQUIRE(!bound.empty());

  // Each RPC: echo headers come back in the initial metadata and trailers,
  // the backend is the bound one and the session ids are the backend's.
  auto check = [&](grpc::ClientContext& ctx, const grpc::Status& s, const std::string& sid,
                   const std::string& ssid) {
    INFO(s.error_message() << " session_id=" << sid << " server_side=" << ssid);
    CHECK(s.ok());
    CHECK(backend_of(ctx) == bound);
    CHECK(header(ctx, "x-echo-tenant") == "team-a");
    CHECK(header(ctx, "x-echo-blob-bin") == std::string("\x00\x01\xfe\xff", 4));
    CHECK(header(ctx, "x-echo-trailer-tenant", true) == "team-a");
    CHECK(header(ctx, "x-echo-trailer-blob-bin", true) == std::string("\x00\x01\xfe\xff", 4));
    CHECK(header(ctx, "x-fake-request-id", true).size() == 32);  // generated by scg
    CHECK(sid == session);
    CHECK(ssid.rfind(bound + "/", 0) == 0);
  };
  auto prepare = [](grpc::ClientContext& ctx) {
    ctx.AddMetadata("x-echo-tenant", "team-a");
    ctx.AddMetadata("x-echo-blob-bin", std::string("\x00\x01\xfe\xff", 4));
  };
#define SCG_UNARY(Rpc, Req, Resp, setup)                               \
  {                                                                    \
    grpc::ClientContext ctx;                                           \
    prepare(ctx);                                                      \
    sc::Req req;                                                       \
    req.set_session_id(session);                                       \
    *req.mutable_user_context() = user("alice");                       \
    setup;                                                             \
    sc::Resp resp;                                                     \
    auto s = stub.Rpc(&ctx, req, &resp);                               \
    INFO(#Rpc);                                                        \
    check(ctx, s, resp.session_id(), resp.server_side_session_id());   \
  }
  SCG_UNARY(AnalyzePlan, AnalyzePlanRequest, AnalyzePlanResponse, {})
  SCG_UNARY(Config, ConfigRequest, ConfigResponse, {})
  SCG_UNARY(ArtifactStatus, ArtifactStatusesRequest, ArtifactStatusesResponse, req.add_names("a.jar"))
  SCG_UNARY(Interrupt, InterruptRequest, InterruptResponse,
            req.set_interrupt_type(sc::InterruptRequest::INTERRUPT_TYPE_ALL))
  SCG_UNARY(FetchErrorDetails, FetchErrorDetailsRequest, FetchErrorDetailsResponse, req.set_error_id("e1"))
  SCG_UNARY(GetStatus, GetStatusRequest, GetStatusResponse, {})
  SCG_UNARY(CloneSession, CloneSessionRequest, CloneSessionResponse, req.set_new_session_id("clone-of-1"))
#undef SCG_UNARY

  {  // ExecutePlan, then ReleaseExecute(release_all) of it
    grpc::ClientContext ctx;
    prepare(ctx);
    auto reader = stub.ExecutePlan(&ctx, execute(session, "alice", "op-every-rpc"));
    sc::ExecutePlanResponse r, in;
    int n = 0;
    while (reader->Read(&in)) {
      ++n;
      r = in;
      CHECK(r.operation_id() == "op-every-rpc");
    }
    auto status = reader->Finish();
    check(ctx, status, r.session_id(), r.server_side_session_id());
    CHECK(n == 4);  // 3 batches and result_complete (the fake's default)
    CHECK(r.has_result_complete());

    grpc::ClientContext rctx;
    prepare(rctx);
    sc::ReleaseExecuteRequest rel;
    rel.set_session_id(session);
    *rel.mutable_user_context() = user("alice");
    rel.set_operation_id("op-every-rpc");
    rel.mutable_release_all();
    sc::ReleaseExecuteResponse rresp;
    auto rstatus = stub.ReleaseExecute(&rctx, rel, &rresp);
    check(rctx, rstatus, rresp.session_id(), rresp.server_side_session_id());
  }
  {  // ReattachExecute of an operation that finished: the backend answers
    grpc::ClientContext ctx;
    prepare(ctx);
    auto reader = stub.ReattachExecute(&ctx, reattach(session, "alice", "op-every-rpc", ""));
    sc::ExecutePlanResponse r;
    while (reader->Read(&r)) {
    }
    auto s = reader->Finish();
    CHECK(s.error_code() == grpc::StatusCode::INTERNAL);
    CHECK(s.error_message().find("INVALID_HANDLE.OPERATION_") != std::string::npos);
    CHECK(!s.error_details().empty());
  }
  {  // AddArtifacts: a client stream of three messages
    grpc::ClientContext ctx;
    prepare(ctx);
    sc::AddArtifactsResponse resp;
    auto writer = stub.AddArtifacts(&ctx, &resp);
    for (int i = 0; i < 3; ++i) {
      sc::AddArtifactsRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user("alice");
      req.set_batch(std::string(1000 + i, 'x'));
      REQUIRE(writer->Write(req));
    }
    writer->WritesDone();
    auto status = writer->Finish();
    check(ctx, status, resp.session_id(), resp.server_side_session_id());
    CHECK(resp.artifacts_size() == 3);
  }
  {  // ReleaseSession last
    grpc::ClientContext ctx;
    prepare(ctx);
    sc::ReleaseSessionRequest req;
    req.set_session_id(session);
    *req.mutable_user_context() = user("alice");
    sc::ReleaseSessionResponse resp;
    auto status = stub.ReleaseSession(&ctx, req, &resp);
    check(ctx, status, resp.session_id(), resp.server_side_session_id());
  }
  // scg learned and forgot what it should have.
  CHECK(eventually([&] { return metric_value(env.gw.admin_port, "scg_router_sessions_released_total") >= 1; }, 5s));
  CHECK(metric_value(env.gw.admin_port, "scg_router_sessions_released_total") == 1);
  CHECK(metric_value(env.gw.admin_port, "scg_router_operations_released_total") == 1);
  CHECK(metric_value(env.gw.admin_port, "scg_router_clones_bound_total") == 1);
}

TEST_CASE("responses and errors come back byte for byte as the backend sent them",
          "[integration]") {
  three_backends env;
  auto gw = channel_to(env.gw.grpc_port);
  sc::ConfigRequest req;
  req.set_session_id("verbatim-session");
  *req.mutable_user_context() = user("bob");
  req.set_operation("\x0a\x03\x66\x6f\x6f");  // opaque to scg
  const std::string bytes = req.SerializeAsString();
  const std::string method = "/spark.connect.SparkConnectService/Config";

  auto via = call_raw(*gw, method, {bytes});
  REQUIRE(via.status.ok());
  const auto& backend = env.by_name(header(via.initial, "x-fake-backend"));
  auto direct = call_raw(*channel_to(backend.grpc_port), method, {bytes});
  REQUIRE(direct.status.ok());
  CHECK(via.responses == direct.responses);

  // An injected Spark-style failure: code, message and status details intact.
  std::map<std::string, std::string> fail{{"x-fake-fail", "13"}, {"x-request-id", "rid-verbatim"}};
  auto err_via = call_raw(*gw, method, {bytes}, fail);
  auto err_direct = call_raw(*channel_to(backend.grpc_port), method, {bytes}, fail);
  CHECK(err_via.status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK(err_via.status.error_message() == err_direct.status.error_message());
  CHECK(err_via.status.error_details() == err_direct.status.error_details());
  CHECK(header(err_via.trailing, "x-fake-request-id") == "rid-verbatim");
  google::rpc::Status details;
  REQUIRE(details.ParseFromString(err_via.status.error_details()));
  CHECK(details.details_size() == 2);  // ErrorInfo and RetryInfo
}

TEST_CASE("an unknown method is forwarded as a byte stream both ways", "[integration]") {
  three_backends env;
  auto gw = channel_to(env.gw.grpc_port);
  sc::ConfigRequest first;
  first.set_session_id("future-rpc-session");
  *first.mutable_user_context() = user("carol");
  std::vector<std::string> msgs{first.SerializeAsString(), std::string("\x0a\x01z", 3),
                                std::string(70000, '\x01')};
  auto r = call_raw(*gw, "/spark.connect.SparkConnectService/SomeFutureRpc", msgs,
                    {{"x-echo-probe", "1"}});
  INFO(r.status.error_message());
  REQUIRE(r.status.ok());
  CHECK(r.responses == msgs);
  CHECK(header(r.initial, "x-echo-probe") == "1");
  CHECK(!header(r.initial, "x-fake-backend").empty());

  auto other = call_raw(*gw, "/grpc.health.v1.Health/Check", {std::string()});
  CHECK(other.status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
}

TEST_CASE("100 sessions with mixed rpcs keep one backend each and spread over backends",
          "[integration]") {
  three_backends env;
  auto& stub = *env.stub;
  std::map<std::string, int> per_backend;
  int changes = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string session = "affinity-" + std::to_string(i);
    const std::string uid = "user-" + std::to_string(i % 7);
    std::string first;
    std::string ssid = config(stub, session, uid, &first).server_side_session_id();
    per_backend[first]++;
    for (int round = 0; round < 3; ++round) {
      std::string b;
      CHECK(config(stub, session, uid, &b).server_side_session_id() == ssid);
      changes += b != first;
      auto s = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, stub, execute(session, uid));
      CHECK(s.status.ok());
      changes += s.backend != first;
      grpc::ClientContext ctx;
      sc::AnalyzePlanRequest a;
      a.set_session_id(session);
      *a.mutable_user_context() = user(uid);
      sc::AnalyzePlanResponse ar;
      CHECK(stub.AnalyzePlan(&ctx, a, &ar).ok());
      changes += backend_of(ctx) != first;
    }
  }
  CHECK(changes == 0);
  REQUIRE(per_backend.size() == 3);
  for (const auto& [name, n] : per_backend) CHECK(n >= 25);
  auto [code, body] = http_get(env.gw.admin_port, "/api/v1/backends");
  auto j = nlohmann::json::parse(body);
  std::size_t total = 0;
  for (const auto& b : j["backends"]) total += b["sessions"].get<std::size_t>();
  CHECK(total == 100);
}

TEST_CASE("a cloned session follows its parent's backend", "[integration]") {
  three_backends env;
  auto& stub = *env.stub;
  std::string parent_backend;
  config(stub, "clone-parent", "dora", &parent_backend);
  for (bool client_chosen : {true, false}) {
    grpc::ClientContext ctx;
    sc::CloneSessionRequest req;
    req.set_session_id("clone-parent");
    *req.mutable_user_context() = user("dora");
    if (client_chosen) req.set_new_session_id("clone-child-chosen");
    sc::CloneSessionResponse resp;
    REQUIRE(stub.CloneSession(&ctx, req, &resp).ok());
    REQUIRE(!resp.new_session_id().empty());
    // The binding is made asynchronously by the router: wait until it is listed,
    // without a call that would bind the child itself.
    CHECK(eventually([&] { return !listed_backend(env.gw, resp.new_session_id()).empty(); }, 3s));
    CHECK(listed_backend(env.gw, resp.new_session_id()) == parent_backend);
    std::string child_backend;
    config(stub, resp.new_session_id(), "dora", &child_backend);
    CHECK(child_backend == parent_backend);
  }
}

TEST_CASE("a reattach follows its operation, whoever chose the id and whatever session it names",
          "[integration]") {
  three_backends env;
  auto& stub = *env.stub;
  const std::map<std::string, std::string> cut{{"x-fake-responses", "6"},
                                               {"x-fake-stream-max-responses", "2"}};
  // Sessions on every backend, so a wrong route would show.
  std::vector<std::string> sessions;
  std::set<std::string> backends;
  for (int i = 0; backends.size() < 3 && i < 30; ++i) {
    std::string b;
    config(stub, "reattach-" + std::to_string(i), "erin", &b);
    sessions.push_back("reattach-" + std::to_string(i));
    backends.insert(b);
  }
  REQUIRE(backends.size() == 3);

  for (bool client_chosen : {true, false}) {
    auto first = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, stub,
                             execute(sessions[0], "erin", client_chosen ? "op-chosen-1" : ""), cut);
    REQUIRE(first.status.ok());
    REQUIRE(first.responses.size() == 2);
    CHECK_FALSE(first.complete());
    const std::string op = first.responses[0].operation_id();
    REQUIRE(!op.empty());
    std::string last = first.responses.back().response_id();

    // Reattach with the right session, and then under every other session id:
    // each must reach the backend that runs the operation.
    auto again = read_stream(&sc::SparkConnectService::Stub::ReattachExecute, stub,
                             reattach(sessions[0], "erin", op, last), cut);
    CHECK(again.status.ok());
    CHECK(again.backend == first.backend);
    REQUIRE(!again.responses.empty());
    CHECK(again.responses.front().response_id() != last);
    for (const auto& other : sessions) {
      auto r = read_stream(&sc::SparkConnectService::Stub::ReattachExecute, stub,
                           reattach(other, "erin", op, again.responses.back().response_id()));
      CHECK(r.backend == first.backend);
    }
  }
}

TEST_CASE("large messages pass: 100 MiB request, 100 MiB response, 1 GiB stream",
          "[integration][large]") {
  three_backends env;
  auto& stub = *env.stub;
  {
    auto req = execute("large-1", "fay");
    req.set_plan(std::string(100u << 20, 'p'));
    auto r = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, stub, req);
    INFO(r.status.error_message());
    CHECK(r.status.ok());
    CHECK(r.complete());
  }
  {
    auto r = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, stub, execute("large-1", "fay"),
                         {{"x-fake-responses", "1"}, {"x-fake-payload-bytes", std::to_string(100u << 20)}});
    INFO(r.status.error_message());
    REQUIRE(r.status.ok());
    REQUIRE(r.responses.size() == 2);
    CHECK(r.responses[0].arrow_batch().data().size() == (100u << 20));
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-fake-responses", "256");
    ctx.AddMetadata("x-fake-payload-bytes", std::to_string(4u << 20));
    ctx.set_deadline(std::chrono::system_clock::now() + 120s);
    auto reader = stub.ExecutePlan(&ctx, execute("large-1", "fay"));
    sc::ExecutePlanResponse r;
    std::uint64_t bytes = 0, n = 0;
    long max_rss = 0;
    while (reader->Read(&r)) {
      bytes += r.arrow_batch().data().size();
      if (++n % 32 == 0) max_rss = std::max(max_rss, env.gw.proc.rss_kib());
    }
    auto s = reader->Finish();
    INFO(s.error_message());
    CHECK(s.ok());
    CHECK(bytes == (1ull << 30));
    CHECK(r.has_result_complete());
    CHECK(max_rss < 256 * 1024);  // bounded: a few messages in flight, not the stream
  }
}

TEST_CASE("a slow reader slows the backend instead of filling scg's memory", "[integration]") {
  three_backends env;
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-fake-responses", "200");
  ctx.AddMetadata("x-fake-payload-bytes", std::to_string(4u << 20));
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  auto reader = env.stub->ExecutePlan(&ctx, execute("slow-reader", "gus"));
  sc::ExecutePlanResponse r;
  REQUIRE(reader->Read(&r));
  const auto& backend = env.by_name(backend_of(ctx));
  // The client stops reading; the span is the test: time enough for the backend to run far past the bound
  // were it not paced by the reader.
  std::this_thread::sleep_for(1500ms);
  auto [code, body] = http_get(backend.ui_port, "/fake/stats");
  REQUIRE(code == 200);
  auto stats = nlohmann::json::parse(body);
  // 800 MiB are waiting; only a handful of 4 MiB messages may be in flight.
  CHECK(stats["bytes_out"].get<std::uint64_t>() < (48ull << 20));
  CHECK(env.gw.proc.rss_kib() < 160 * 1024);
  ctx.TryCancel();
  while (reader->Read(&r)) {
  }
  CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
}

TEST_CASE("deadlines and cancellation reach the backend", "[integration]") {
  three_backends env;
  {  // deadline: 10 responses 300 ms apart against a 500 ms deadline
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-fake-responses", "10");
    ctx.AddMetadata("x-fake-delay-ms", "300");
    ctx.set_deadline(std::chrono::system_clock::now() + 500ms);
    auto t0 = std::chrono::steady_clock::now();
    auto reader = env.stub->ExecutePlan(&ctx, execute("deadline-1", "hal"));
    sc::ExecutePlanResponse r;
    while (reader->Read(&r)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  }
  {  // the backend sees the deadline itself: its own stream is cancelled
    std::string backend_name;
    config(*env.stub, "deadline-1", "hal", &backend_name);
    const auto& backend = env.by_name(backend_name);
    auto before = nlohmann::json::parse(http_get(backend.ui_port, "/fake/stats").second);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-fake-responses", "50");
    ctx.AddMetadata("x-fake-delay-ms", "100");
    auto reader = env.stub->ExecutePlan(&ctx, execute("deadline-1", "hal"));
    sc::ExecutePlanResponse r;
    REQUIRE(reader->Read(&r));
    ctx.TryCancel();
    while (reader->Read(&r)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
    // The backend stops producing: its own stream is cancelled.
    auto cancelled = [&] {
      return nlohmann::json::parse(http_get(backend.ui_port, "/fake/stats").second)["streams_cancelled"].get<long>();
    };
    CHECK(eventually([&] { return cancelled() > before["streams_cancelled"].get<long>(); }, 3s));
  }
}

TEST_CASE("bodies that are not valid messages get INVALID_ARGUMENT and others carry on",
          "[integration]") {
  three_backends env;
  auto gw = channel_to(env.gw.grpc_port);
  std::string good_backend;
  config(*env.stub, "bystander", "ivy", &good_backend);

  auto bad = call_raw(*gw, "/spark.connect.SparkConnectService/Config", {std::string("\x0a\xff\xff", 3)});
  CHECK(bad.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(bad.status.error_message().find("Config") != std::string::npos);

  std::mt19937 rng(42);
  const char* methods[] = {"ExecutePlan", "Config", "AddArtifacts", "ReattachExecute", "Interrupt",
                           "CloneSession", "Nonexistent"};
  int invalid = 0;
  for (int i = 0; i < 300; ++i) {
    std::string junk(1 + rng() % 64, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    auto r = call_raw(*gw, std::string("/spark.connect.SparkConnectService/") + methods[i % 7], {junk},
                      {}, 5s);
    invalid += r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
    // Anything else came from a backend, which parsed it its own way.
    CHECK(r.status.error_code() != grpc::StatusCode::UNAVAILABLE);
  }
  CHECK(invalid > 100);
  CHECK(metric_value(env.gw.admin_port, "scg_forward_invalid_argument_total") == invalid + 1);
  std::string after;
  grpc::Status s;
  config(*env.stub, "bystander", "ivy", &after, &s);
  CHECK(s.ok());
  CHECK(after == good_backend);
  CHECK_FALSE(env.gw.proc.wait(0ms));  // still running
}

TEST_CASE("a dead backend answers UNAVAILABLE quickly, naming the backend", "[integration]") {
  temp_dir dir;
  auto live = start_fake(dir, "fake-live");
  int dead_port;
  {
    auto doomed = start_fake(dir, "fake-dead");
    dead_port = doomed.grpc_port;
  }  // killed: its port is closed now
  std::string yaml = "bind_addr: \"127.0.0.1:0\"\nadmin_addr: \"127.0.0.1:0\"\n"
                     "placement: { strategy: round_robin }\n"
                     "backends:\n  - { name: fake-dead, address: \"127.0.0.1:" +
                     std::to_string(dead_port) + "\" }\n";
  {
    auto gw = start_gateway(dir, yaml, "only-dead");
    auto stub = stub_to(gw.grpc_port);
    for (int i = 0; i < 3; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      grpc::Status s;
      config(*stub, "dead-" + std::to_string(i), "jay", nullptr, &s);
      INFO(s.error_message());
      CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
      CHECK(s.error_message().find("fake-dead") != std::string::npos);
      CHECK(std::chrono::steady_clock::now() - t0 < 3500ms);
      std::this_thread::sleep_for(300ms);  // pacing is the test: each call comes after the last failed connect, not within it
    }
  }
  {  // beside a live backend, new sessions go to the live one once the dead is seen
    auto gw = start_gateway(dir, yaml + "  - { name: fake-live, address: \"" + live.address() + "\" }\n",
                            "dead-and-live");
    auto stub = stub_to(gw.grpc_port);
    CHECK(eventually([&] { return !listed_healthy(gw, "fake-dead"); }, 5s));
    for (int i = 0; i < 6; ++i) {
      std::string b;
      grpc::Status s;
      config(*stub, "mixed-" + std::to_string(i), "jay", &b, &s);
      CHECK(s.ok());
      CHECK(b == "fake-live");
    }
  }
}

TEST_CASE("x-request-id is generated when absent, kept when present, and logged", "[integration]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-rid");
  auto gw = start_gateway(dir, gateway_yaml({&a}, "") + "", "rid");
  auto ch = channel_to(gw.grpc_port);
  sc::ConfigRequest req;
  req.set_session_id("rid-session");
  auto none = call_raw(*ch, "/spark.connect.SparkConnectService/Config", {req.SerializeAsString()});
  auto generated = header(none.trailing, "x-fake-request-id");
  CHECK(generated.size() == 32);
  CHECK(generated.find_first_not_of("0123456789abcdef") == std::string::npos);
  auto given = call_raw(*ch, "/spark.connect.SparkConnectService/Config", {req.SerializeAsString()},
                        {{"x-request-id", "client-rid-42"}});
  CHECK(header(given.trailing, "x-fake-request-id") == "client-rid-42");
}

TEST_CASE("the admin endpoint reports health, readiness, backends and metrics", "[integration]") {
  three_backends env;
  CHECK(http_get(env.gw.admin_port, "/healthz").first == 200);
  CHECK(http_get(env.gw.admin_port, "/readyz").first == 200);
  config(*env.stub, "admin-1", "kim");
  auto [code, body] = http_get(env.gw.admin_port, "/api/v1/backends");
  REQUIRE(code == 200);
  auto j = nlohmann::json::parse(body)["backends"];
  REQUIRE(j.size() == 3);
  std::set<std::string> names;
  for (const auto& b : j) {
    names.insert(b["name"].get<std::string>());
    CHECK(b["healthy"].get<bool>());
    CHECK_FALSE(b["draining"].get<bool>());
    CHECK(b.contains("address"));
    CHECK(b.contains("score"));
  }
  CHECK(names == std::set<std::string>{"fake-a", "fake-b", "fake-c"});
  // A call is counted when it is done on scg's side, a moment after the client has its answer.
  CHECK(eventually([&] { return metric_value(env.gw.admin_port, "scg_forward_rpcs_total{rpc=\"Config\",code=\"OK\"}") == 1; }, 2s));
  CHECK(metric_value(env.gw.admin_port, "scg_sessions_active") == 1);
}

TEST_CASE("SIGTERM drains: not ready at once, streams in flight finish, exit 0", "[integration]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-drain");
  auto gw = start_gateway(dir, gateway_yaml({&a}, "shutdown: { deadline_secs: 10 }\n"), "drain");
  auto stub = stub_to(gw.grpc_port);
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-fake-responses", "8");
  ctx.AddMetadata("x-fake-delay-ms", "150");
  auto reader = stub->ExecutePlan(&ctx, execute("drain-1", "lee"));
  sc::ExecutePlanResponse r;
  REQUIRE(reader->Read(&r));
  gw.proc.signal(SIGTERM);
  CHECK(eventually([&] { return http_get(gw.admin_port, "/readyz").first == 503; }, 1s));
  int n = 1;
  while (reader->Read(&r)) ++n;
  CHECK(reader->Finish().ok());
  CHECK(n == 9);
  CHECK(gw.proc.wait(10s) == 0);
}

TEST_CASE("idle sessions and unseen operations expire after their ttl", "[integration]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-ttl");
  auto gw = start_gateway(dir, gateway_yaml({&a}, "affinity: { session_ttl_secs: 3, op_ttl_secs: 1 }\n"),
                          "ttl");
  auto stub = stub_to(gw.grpc_port);
  for (int i = 0; i < 5; ++i) config(*stub, "ttl-" + std::to_string(i), "max");
  auto s = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, *stub, execute("ttl-0", "max", "op-ttl"));
  REQUIRE(s.status.ok());
  CHECK(metric_value(gw.admin_port, "scg_sessions_active") == 5);
  CHECK(metric_value(gw.admin_port, "scg_operations_active") == 1);
  // The operation goes first, by its own ttl, while its session still lives.
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_operations_active") == 0; }, 8s));
  CHECK(metric_value(gw.admin_port, "scg_router_operations_expired_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_sessions_active") == 5);
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_sessions_active") == 0; }, 8s));
  CHECK(metric_value(gw.admin_port, "scg_router_sessions_expired_total") == 5);
}

TEST_CASE("a session whose operations were released stays bound without an actor, then expires", "[integration]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-hib-a");
  auto b = start_fake(dir, "fake-hib-b");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "affinity: { session_ttl_secs: 3, op_ttl_secs: 60 }\n"), "hib");
  auto stub = stub_to(gw.grpc_port);
  const auto home = backend_for_session(gw.grpc_port, "hib-1", "ines");
  CHECK(metric_value(gw.admin_port, "scg_session_actors") == 0);  // idle from the start
  auto s = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, *stub, execute("hib-1", "ines", "op-hib"));
  REQUIRE(s.status.ok());
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_session_actors") == 1; }, 2s));
  grpc::ClientContext rctx;
  sc::ReleaseExecuteRequest rel;
  rel.set_session_id("hib-1");
  *rel.mutable_user_context() = user("ines");
  rel.set_operation_id("op-hib");
  rel.mutable_release_all();
  sc::ReleaseExecuteResponse rresp;
  REQUIRE(stub->ReleaseExecute(&rctx, rel, &rresp).ok());
  // The last operation released: the actor goes, the binding stays.
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_session_actors") == 0; }, 2s));
  CHECK(metric_value(gw.admin_port, "scg_sessions_active") == 1);
  for (int i = 0; i < 5; ++i) CHECK(backend_for_session(gw.grpc_port, "hib-1", "ines") == home);
  // A new operation brings the actor back.
  auto again = read_stream(&sc::SparkConnectService::Stub::ExecutePlan, *stub, execute("hib-1", "ines", "op-hib-2"));
  REQUIRE(again.status.ok());
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_session_actors") == 1; }, 2s));
  // Idle past its ttl, the session is forgotten with its operation.
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_sessions_active") == 0; }, 8s));
  CHECK(metric_value(gw.admin_port, "scg_router_sessions_expired_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_operations_active") == 0);
  CHECK(metric_value(gw.admin_port, "scg_session_actors") == 0);
}

TEST_CASE("new sessions go to the backend whose Spark UI reports the least load",
          "[integration][placement]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-busy");
  auto b = start_fake(dir, "fake-idle");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "placement: { poll_interval_ms: 200, ewma_alpha: 1.0 }\n"),
                          "placement");
  auto set_load = [](const fake_spark& f, int slots, int active, int pending) {
    auto body = nlohmann::json{{"slots", slots}, {"active", active}, {"pending", pending}}.dump();
    REQUIRE(http_post(f.ui_port, "/fake/load", body).first == 200);
  };
  auto utilization_of = [&](const std::string& name) {
    auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
    for (const auto& be : j["backends"])
      if (be["name"] == name) return be["utilization"].is_null() ? -1.0 : be["utilization"].get<double>();
    return -2.0;
  };
  auto wait_for = [&](const std::string& name, double value) {
    return eventually([&] { return std::abs(utilization_of(name) - value) < 1e-6; }, 5s);
  };
  set_load(a, 8, 8, 8);  // saturated: (8 + 8) / 8 clipped to 1
  set_load(b, 8, 1, 0);  // 1/8 busy
  REQUIRE(wait_for("fake-busy", 1.0));
  REQUIRE(wait_for("fake-idle", 0.125));
  for (int i = 0; i < 10; ++i)
    CHECK(backend_for_session(gw.grpc_port, "load-" + std::to_string(i), "quinn") == "fake-idle");

  set_load(a, 8, 0, 0);
  set_load(b, 8, 8, 4);
  REQUIRE(wait_for("fake-busy", 0.0));
  REQUIRE(wait_for("fake-idle", 1.0));
  for (int i = 10; i < 20; ++i)
    CHECK(backend_for_session(gw.grpc_port, "load-" + std::to_string(i), "quinn") == "fake-busy");
  // Existing sessions stay where they are.
  CHECK(backend_for_session(gw.grpc_port, "load-0", "quinn") == "fake-idle");
  CHECK(metric_value(gw.admin_port, "scg_backend_poll_errors_total{backend=\"fake-busy\"}") == 0);
}

TEST_CASE("a Spark UI that cannot be polled leaves the backend scored on sessions alone",
          "[integration][placement]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-noui");
  std::string yaml = "bind_addr: \"127.0.0.1:0\"\nadmin_addr: \"127.0.0.1:0\"\n"
                     "placement: { poll_interval_ms: 100 }\nbackends:\n"
                     "  - { name: fake-noui, address: \"" + a.address() + "\", ui_url: \"http://127.0.0.1:1\" }\n";
  auto gw = start_gateway(dir, yaml, "noui");
  CHECK(eventually(
      [&] { return metric_value(gw.admin_port, "scg_backend_poll_errors_total{backend=\"fake-noui\"}") >= 3; }, 5s));
  CHECK(backend_for_session(gw.grpc_port, "noui-1", "rae") == "fake-noui");
  auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
  CHECK(j["backends"][0]["utilization"].is_null());
  // One log line for the failing state, not one per poll.
  std::ifstream log(gw.proc.log_path());
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::size_t n = 0;
  for (auto pos = text.find("poll_failed"); pos != std::string::npos; pos = text.find("poll_failed", pos + 1)) ++n;
  CHECK(n == 1);
}

TEST_CASE("a drained backend takes no new sessions while its sessions carry on",
          "[integration][placement]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-old");
  auto b = start_fake(dir, "fake-new");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}), "drain-backend");
  std::string on_old;
  for (int i = 0; i < 6 && on_old.empty(); ++i) {
    const std::string s = "drain-pre-" + std::to_string(i);
    if (backend_for_session(gw.grpc_port, s, "sam") == "fake-old") on_old = s;
  }
  REQUIRE(!on_old.empty());
  CHECK(http_post(gw.admin_port, "/api/v1/backends/nope/drain", "").first == 404);
  auto [code, body] = http_post(gw.admin_port, "/api/v1/backends/fake-old/drain", "");
  REQUIRE(code == 200);
  REQUIRE(eventually([&] { return listed_draining(gw, "fake-old"); }, 2s));
  for (int i = 0; i < 8; ++i)
    CHECK(backend_for_session(gw.grpc_port, "drain-new-" + std::to_string(i), "sam") == "fake-new");
  CHECK(backend_for_session(gw.grpc_port, on_old, "sam") == "fake-old");  // carries on
  auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
  for (const auto& be : j["backends"])
    if (be["name"] == "fake-old") {
      CHECK(be["draining"].get<bool>());
      CHECK(be["sessions"].get<int>() >= 1);  // what an operator waits on
    }
  REQUIRE(http_post(gw.admin_port, "/api/v1/backends/fake-old/undrain", "").first == 200);
  REQUIRE(eventually([&] { return !listed_draining(gw, "fake-old"); }, 2s));
  std::set<std::string> used;
  for (int i = 0; i < 8; ++i) used.insert(backend_for_session(gw.grpc_port, "drain-after-" + std::to_string(i), "sam"));
  CHECK(used.count("fake-old") == 1);
}

TEST_CASE("a backend that stops answering probes gets no new sessions until it answers again",
          "[integration][placement]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-frozen");
  auto b = start_fake(dir, "fake-fine");
  auto gw = start_gateway(
      dir, gateway_yaml({&a, &b}, "health: { interval_ms: 100, timeout_ms: 300, failures: 2, successes: 2 }\n"),
      "health");
  auto healthy = [&](const std::string& name) {
    auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
    for (const auto& be : j["backends"])
      if (be["name"] == name) return be["healthy"].get<bool>();
    return false;
  };
  auto wait_for = [&](const std::string& name, bool want) {
    return eventually([&] { return healthy(name) == want; }, 5s);
  };
  REQUIRE(wait_for("fake-frozen", true));
  a.proc.signal(SIGSTOP);  // the TCP connection stays up; nothing answers
  CHECK(wait_for("fake-frozen", false));
  for (int i = 0; i < 6; ++i)
    CHECK(backend_for_session(gw.grpc_port, "probe-" + std::to_string(i), "tess") == "fake-fine");
  CHECK(metric_value(gw.admin_port, "scg_backend_healthy{backend=\"fake-frozen\"}") == 0);
  a.proc.signal(SIGCONT);
  CHECK(wait_for("fake-frozen", true));
}

TEST_CASE("sessions of a lost backend are rebound, or refused naming it, as configured",
          "[integration][placement]") {
  for (const std::string action : {"rebind", "fail"}) {
    temp_dir dir;
    auto a = std::make_unique<fake_spark>(start_fake(dir, "fake-doomed"));
    auto b = start_fake(dir, "fake-spare");
    auto gw = start_gateway(
        dir, gateway_yaml({a.get(), &b}, "on_backend_lost: { after_secs: 1, action: " + action + " }\n"),
        "lost-" + action);
    std::vector<std::string> on_doomed;
    for (int i = 0; i < 10; ++i) {
      const std::string s = "lost-" + std::to_string(i);
      if (backend_for_session(gw.grpc_port, s, "uma") == "fake-doomed") on_doomed.push_back(s);
    }
    REQUIRE(!on_doomed.empty());
    a.reset();  // killed
    // The first session probes: until fake-doomed counts as lost (down for
    // after_secs) its call fails UNAVAILABLE there, and is neither rebound nor refused.
    grpc::Status first;
    std::string first_served;
    CHECK(eventually([&] {
      first_served = backend_for_session(gw.grpc_port, on_doomed[0], "uma", &first);
      return first.error_code() != grpc::StatusCode::UNAVAILABLE;
    }, 5s));
    for (std::size_t i = 0; i < on_doomed.size(); ++i) {
      grpc::Status status = first;
      auto served = first_served;
      if (i > 0) served = backend_for_session(gw.grpc_port, on_doomed[i], "uma", &status);
      if (action == "rebind") {
        CHECK(served == "fake-spare");
      } else {
        CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
        CHECK(status.error_message().find("fake-doomed") != std::string::npos);
      }
    }
    if (action == "rebind") {
      CHECK(metric_value(gw.admin_port, "scg_router_rebinds_total") == static_cast<long>(on_doomed.size()));
      CHECK(backend_for_session(gw.grpc_port, on_doomed[0], "uma") == "fake-spare");  // it stays
    } else {
      CHECK(metric_value(gw.admin_port, "scg_forward_backend_lost_total") == static_cast<long>(on_doomed.size()));
    }
  }
}
