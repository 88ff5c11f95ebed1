// The HTTP/2 data plane (net/h2, net/forwarder.cpp) against real clients and
// real scg-fake-spark backends: compressed messages, the message size limit,
// requests that are not gRPC, many streams on one connection, cancellation and
// a backend that restarts on the same port.
#include <catch2/catch.hpp>

#include <grpc/compression.h>
#include <grpcpp/generic/generic_stub.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

const std::string spark_service = "/spark.connect.SparkConnectService/";

std::string backend_of(const grpc::ClientContext& ctx) {
  auto name = header(ctx, "x-fake-backend");
  return name.empty() ? header(ctx, "x-fake-backend", true) : name;
}

/// The last `n` lines of a log file (for failure messages).
std::string log_tail(const std::string& path, std::size_t n = 30) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

/// One Config, with the client's compression `algo` (GRPC_COMPRESS_NONE: plain).
grpc::Status config(sc::SparkConnectService::Stub& stub, const std::string& session, const std::string& user_id,
                    grpc_compression_algorithm algo, std::string* backend, sc::ConfigResponse* out = nullptr,
                    const std::string& padding = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  if (algo != GRPC_COMPRESS_NONE) ctx.set_compression_algorithm(algo);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  if (!padding.empty()) req.set_client_type(padding);
  sc::ConfigResponse resp;
  auto s = stub.Config(&ctx, req, &resp);
  if (backend) *backend = backend_of(ctx);
  if (out) *out = resp;
  return s;
}

/// An ExecutePlan read with the callback API, so hundreds can run at once on
/// one channel without a thread each. Must outlive its OnDone.
class async_execute final : public grpc::ClientReadReactor<sc::ExecutePlanResponse> {
 public:
  async_execute(sc::SparkConnectService::Stub& stub, sc::ExecutePlanRequest req,
                const std::map<std::string, std::string>& md, std::chrono::milliseconds deadline)
      : request_(std::move(req)) {
    for (const auto& [k, v] : md) ctx_.AddMetadata(k, v);
    ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
    done_future_ = done_.get_future();
    first_future_ = first_.get_future();
    stub.async()->ExecutePlan(&ctx_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  /// Never frees a call still running (a failed REQUIRE on the way out).
  ~async_execute() override {
    if (!wait(0ms)) {
      cancel();
      (void)wait(60s);  // the deadline bounds it anyway
    }
  }

  void OnReadInitialMetadataDone(bool ok) override {
    if (ok) backend_ = header(ctx_, "x-fake-backend");
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (responses_++ == 0) first_.set_value();
    complete_ = response_.has_result_complete();
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    if (responses_ == 0) first_.set_value();
    done_.set_value();
  }

  /// Waits up to `t` for the end; false on time-out.
  bool wait(std::chrono::milliseconds t) { return done_future_.wait_for(t) == std::future_status::ready; }
  /// Waits up to `t` for the first response (or the end).
  bool wait_first(std::chrono::milliseconds t) { return first_future_.wait_for(t) == std::future_status::ready; }
  void cancel() { ctx_.TryCancel(); }

  // Read only after wait() returned true.
  const grpc::Status& status() const { return status_; }
  int responses() const { return responses_; }
  bool complete() const { return complete_; }
  const std::string& backend() const { return backend_; }

 private:
  grpc::ClientContext ctx_;
  sc::ExecutePlanRequest request_;
  sc::ExecutePlanResponse response_;
  std::promise<void> done_, first_;
  std::future<void> done_future_, first_future_;
  grpc::Status status_;
  int responses_ = 0;
  bool complete_ = false;
  std::string backend_;
};

/// Waits for every call (up to `t` in all); those still running are cancelled
/// and awaited (their deadline bounds that), so none outlives the test.
bool wait_all(std::vector<std::unique_ptr<async_execute>>& calls, std::chrono::milliseconds t) {
  const auto until = std::chrono::steady_clock::now() + t;
  bool all = true;
  for (auto& c : calls) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (!c->wait(std::max(left, std::chrono::milliseconds(0)))) {
      all = false;
      c->cancel();
    }
  }
  if (!all)
    for (auto& c : calls) c->wait(60s);
  return all;
}

long fake_stat(const fake_spark& f, const std::string& key) {
  auto [code, body] = http_get(f.ui_port, "/fake/stats");
  if (code != 200) return -1;
  return nlohmann::json::parse(body).value(key, -1L);
}

/// in_flight of backend `name` in /api/v1/backends; -1 when absent.
long backend_in_flight(int admin_port, const std::string& name) {
  auto [code, body] = http_get(admin_port, "/api/v1/backends");
  if (code != 200) return -1;
  const auto j = nlohmann::json::parse(body);
  for (const auto& b : j["backends"])
    if (b["name"] == name) return b["in_flight"].get<long>();
  return -1;
}

/// Runs a shell command; {exit status, its stdout and stderr}.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

bool have(const std::string& tool) { return run("command -v " + tool + " >/dev/null").first == 0; }

/// Starts scg-fake-spark NAME on fixed ports (0: any), retrying a few times
/// while the old process's port is still being released.
std::unique_ptr<fake_spark> start_fake_on(const temp_dir& dir, const std::string& name, int grpc_port, int ui_port,
                                          const std::string& tag) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const auto port_file = dir.file(tag + "-" + std::to_string(attempt) + ".ports");
    process p{{bin("scg-fake-spark"), "--listen", "127.0.0.1:" + std::to_string(grpc_port), "--ui-listen",
               "127.0.0.1:" + std::to_string(ui_port), "--name", name, "--port-file", port_file},
              dir.file(tag + ".log")};
    try {
      auto ports = wait_for_json_file(port_file, 5s);
      return std::make_unique<fake_spark>(
          fake_spark{name, std::move(p), ports.at("grpc").get<int>(), ports.at("ui").get<int>()});
    } catch (const std::exception&) {
    }
    (void)p.wait(1s);  // it exited (port busy) or hangs: killed by p's destructor
    std::this_thread::sleep_for(200ms);  // a retry's back-off: the port's release has no signal to wait on
  }
  return nullptr;
}

}  // namespace

TEST_CASE("compressed calls are routed by their session like plain ones and answered OK",
          "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-za");
  auto b = start_fake(dir, "fake-zb");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "placement: { strategy: round_robin }\n"), "compress");
  auto ch = channel_to(gw.grpc_port);
  auto stub = sc::SparkConnectService::NewStub(ch);
  // Compressible padding, so the client really sends the message compressed
  // (gRPC sends a message plain when compressing would not make it smaller).
  const std::string padding(8192, 'c');

  for (auto algo : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    const std::string tag = algo == GRPC_COMPRESS_GZIP ? "gzip" : "deflate";
    INFO("compression " << tag);
    std::map<std::string, std::string> home;
    std::set<std::string> used;
    // New sessions placed from a compressed first message: scg inflated it
    // to read session_id and user_id.
    for (int i = 0; i < 6; ++i) {
      const std::string session = uuid_of(tag + "-session-" + std::to_string(i));
      std::string backend;
      sc::ConfigResponse resp;
      const auto before = metric_value(gw.admin_port, "scg_forward_request_bytes_total");
      auto s = config(*stub, session, "zoe", algo, &backend, &resp, padding);
      INFO(session << ": " << s.error_message());
      REQUIRE(s.ok());
      REQUIRE(!backend.empty());
      CHECK(resp.session_id() == session);
      CHECK(resp.server_side_session_id().size() == 36);
      // The message went through compressed: far fewer bytes than the padding.
      const auto wire = metric_value(gw.admin_port, "scg_forward_request_bytes_total") - before;
      CHECK(wire > 0);
      CHECK(wire < 1024);
      home[session] = backend;
      used.insert(backend);
    }
    CHECK(used.size() == 2);

    for (const auto& [session, backend] : home) {
      INFO(session << " lives on " << backend);
      // Plain and compressed calls of one session meet on its backend, both ways round.
      grpc::Status plain_status;
      CHECK(backend_for_session(gw.grpc_port, session, "zoe", &plain_status) == backend);
      CHECK(plain_status.ok());
      auto req = execute(session, "zoe");
      req.set_plan(std::string(64 << 10, 'p'));
      const auto before = metric_value(gw.admin_port, "scg_forward_request_bytes_total");
      auto r = execute_plan(*stub, req, {{"x-fake-responses", "3"}}, algo);
      INFO(r.status.error_message());
      CHECK(r.status.ok());
      CHECK(r.backend == backend);
      CHECK(r.responses == 4);
      CHECK(r.complete);
      CHECK(metric_value(gw.admin_port, "scg_forward_request_bytes_total") - before < 4096);
      std::string again;
      sc::ConfigResponse resp;
      CHECK(config(*stub, session, "zoe", algo, &again, &resp, padding).ok());
      CHECK(again == backend);
      CHECK(resp.server_side_session_id().size() == 36);
    }
    // And a session first seen plain keeps its backend when calls turn compressed.
    const std::string plain_first = uuid_of(tag + "-plain-first");
    std::string first;
    REQUIRE(config(*stub, plain_first, "zoe", GRPC_COMPRESS_NONE, &first, nullptr, padding).ok());
    for (int i = 0; i < 3; ++i) {
      std::string b2;
      CHECK(config(*stub, plain_first, "zoe", algo, &b2, nullptr, padding).ok());
      CHECK(b2 == first);
    }
  }
  CHECK(metric_value(gw.admin_port, "scg_forward_invalid_argument_total") == 0);
}

TEST_CASE("messages over limits.max_message_bytes are refused both ways and the connection carries on",
          "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-limit");
  constexpr int limit = 65536;
  auto gw = start_gateway(dir, gateway_yaml({&a}, "limits: { max_message_bytes: " + std::to_string(limit) + " }\n"),
                          "limit");
  auto ch = channel_to(gw.grpc_port);  // the client itself allows 256 MiB
  auto stub = sc::SparkConnectService::NewStub(ch);
  std::string home;
  REQUIRE(config(*stub, uuid_of("limit-1"), "lou", GRPC_COMPRESS_NONE, &home).ok());
  REQUIRE(home == "fake-limit");
  auto still_works = [&](const std::string& what) {
    INFO("after " << what);
    // The client's connection to scg was kept (not closed or sent away); the
    // span is the test: a GOAWAY or close would have arrived within it.
    std::this_thread::sleep_for(200ms);
    CHECK(ch->GetState(false) == GRPC_CHANNEL_READY);
    std::string b;
    sc::ConfigResponse resp;
    auto s = config(*stub, uuid_of("limit-1"), "lou", GRPC_COMPRESS_NONE, &b, &resp);
    CHECK(s.ok());
    CHECK(b == "fake-limit");
    auto r = execute_plan(*stub, execute(uuid_of("limit-1"), "lou"));
    CHECK(r.status.ok());
    CHECK(r.responses == 4);
    CHECK(r.complete);
    CHECK(ch->GetState(false) == GRPC_CHANNEL_READY);
  };
  const auto names_the_limit = [](const grpc::Status& s) {
    return s.error_message().find("limits.max_message_bytes") != std::string::npos;
  };

  {  // a request message over the limit: the first (held for routing) ...
    auto req = execute(uuid_of("limit-1"), "lou");
    req.set_plan(std::string(limit + 1000, 'p'));
    auto r = execute_plan(*stub, req);
    INFO(r.status.error_message());
    CHECK(r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(r.status));
    CHECK(r.responses == 0);
    still_works("a large ExecutePlan request");
  }
  {  // ... a unary one ...
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    sc::ConfigRequest req;
    req.set_session_id(uuid_of("limit-1"));
    *req.mutable_user_context() = user("lou");
    req.set_operation(std::string(4 * limit, 'o'));
    sc::ConfigResponse resp;
    auto s = stub->Config(&ctx, req, &resp);
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(s));
    still_works("a large Config request");
  }
  {  // ... and a later message of a client stream, which passes as it comes.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    sc::AddArtifactsResponse resp;
    auto writer = stub->AddArtifacts(&ctx, &resp);
    sc::AddArtifactsRequest small;
    small.set_session_id(uuid_of("limit-1"));
    *small.mutable_user_context() = user("lou");
    small.set_batch(std::string(100, 'x'));
    CHECK(writer->Write(small));
    auto big = small;
    big.set_batch(std::string(limit + 1, 'y'));
    (void)writer->Write(big);  // may fail once scg has answered
    (void)writer->Write(small);
    writer->WritesDone();
    auto s = writer->Finish();
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(s));
    still_works("a large AddArtifacts message");
  }
  {  // a response message over the limit, from the backend (which would go on sending)
    const auto cancelled_before = fake_stat(a, "streams_cancelled");
    auto r = execute_plan(*stub, execute(uuid_of("limit-1"), "lou"),
                          {{"x-fake-responses", "100"}, {"x-fake-delay-ms", "50"},
                           {"x-fake-payload-bytes", std::to_string(limit + 1)}});
    INFO(r.status.error_message());
    CHECK(r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(r.status));
    CHECK(r.status.error_message().find("fake-limit") != std::string::npos);
    CHECK(r.responses == 0);
    CHECK(r.backend == "fake-limit");
    // scg stopped the backend's stream.
    CHECK(eventually([&] { return fake_stat(a, "streams_cancelled") > cancelled_before; }, 3s));
    still_works("a large response");
  }
  {  // a compressed request message that is small on the wire but inflates past the limit
    auto req = execute(uuid_of("limit-1"), "lou");
    req.set_plan(std::string(4 * limit, 'p'));
    auto r = execute_plan(*stub, req, {}, GRPC_COMPRESS_GZIP);
    INFO(r.status.error_code() << " " << r.status.error_message());
    CHECK(r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(r.status));
    still_works("a compressed request over the limit");
  }
  {  // a response over the limit after one that passed: the first arrives, then the status
    // An unknown method is echoed by the fake: a compressed request comes back
    // uncompressed, so the echo of the second message is over the limit.
    grpc::GenericStub generic(ch);
    sc::ConfigRequest first;
    first.set_session_id(uuid_of("limit-1"));
    *first.mutable_user_context() = user("lou");
    const std::vector<std::string> msgs{first.SerializeAsString(), std::string(2 * limit, 'e')};
    raw_stream call(generic, spark_service + "SomeFutureRpc", msgs, {{}, 10s, GRPC_COMPRESS_GZIP});
    auto [status, initial, trailing, responses] = call.get();
    INFO(status.error_code() << " " << status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(names_the_limit(status));
    // The first echo arrives, then the status.
    REQUIRE(responses.size() == 1);
    CHECK(responses[0] == msgs[0]);
    still_works("a second response over the limit");
  }
  {  // just under the limit passes (an ExecutePlanResponse is under 256 bytes more than its payload)
    auto r = execute_plan(*stub, execute(uuid_of("limit-1"), "lou"),
                          {{"x-fake-responses", "2"}, {"x-fake-payload-bytes", std::to_string(limit - 256)}});
    INFO(r.status.error_message());
    CHECK(r.status.ok());
    CHECK(r.responses == 3);
  }
  CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 3s));
  CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 0);
  CHECK_FALSE(gw.proc.wait(0ms));  // still running
}

TEST_CASE("requests that are not gRPC get a clear error at once", "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-notgrpc");
  auto gw = start_gateway(dir, gateway_yaml({&a}), "notgrpc");
  const std::string base = "http://127.0.0.1:" + std::to_string(gw.grpc_port);

  {  // a gRPC call to another service: UNIMPLEMENTED, naming the method
    auto ch = channel_to(gw.grpc_port);
    for (const std::string method : {"/grpc.health.v1.Health/Check", "/spark.connect.SparkConnectServiceV2/Config",
                                     "/spark.connect.SparkConnectService"}) {
      INFO(method);
      auto t0 = std::chrono::steady_clock::now();
      auto r = call_raw(*ch, method, {std::string("\x0a\x01x", 3)}, {}, 5s);
      CHECK(r.status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
      CHECK(r.status.error_message().find(method) != std::string::npos);
      CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    }
    CHECK(eventually(metric(gw.admin_port, "scg_forward_unimplemented_total") == 3, 2s));
    // The backend never saw them.
    auto stats = nlohmann::json::parse(http_get(a.ui_port, "/fake/stats").second);
    CHECK_FALSE(stats["rpcs"].contains("/grpc.health.v1.Health/Check"));
  }

  // Raw HTTP/2 clients. curl 7.88 stalls on its own side when a complete
  // response comes before its upload has ended (curl#10433), so requests with
  // a body go through nghttp; curl sends only bodiless ones.
  // Both come from scripts/setup.sh (nghttp2-client, curl): a missing one is a failure.
  const bool nghttp = have("nghttp"), curl = have("curl");
  INFO("nghttp (Debian's nghttp2-client) and curl must be installed: run scripts/setup.sh");
  REQUIRE(nghttp);
  REQUIRE(curl);
  {
    const auto small = dir.write("hello.txt", "hello");
    const auto big = dir.write("big.bin", std::string(3u << 20, 'b'));
    struct probe {
      std::string what, args, expect;
    };
    for (const auto& p : {
             // the wrong content-type, with a body: an answer (gRPC status 3) rather than a hang
             probe{"text/plain", "-d " + small + " -H 'content-type: text/plain' " + base + spark_service + "Config",
                   "text/plain"},
             // a GET without a content-type
             probe{"GET", base + "/", "without a content-type"},
             // a body larger than the stream window after scg answered: scg
             // gives the window back, so the upload ends
             probe{"3 MiB json", "-d " + big + " -H 'content-type: application/json' " + base + spark_service +
                                     "ExecutePlan",
                   "application/json"},
         }) {
      INFO(p.what);
      auto t0 = std::chrono::steady_clock::now();
      auto [rc, out] = run("timeout 10 nghttp -v -n " + p.args);
      INFO(out.substr(out.size() > 6000 ? out.size() - 6000 : 0));
      CHECK(rc == 0);
      CHECK(out.find(":status: 200") != std::string::npos);
      CHECK(out.find("grpc-status: 3") != std::string::npos);
      CHECK(out.find("content-type application/grpc") != std::string::npos);  // says what it wants
      CHECK(out.find(p.expect) != std::string::npos);                       // and what it got
      CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    }
  }
  {
    {  // a bodiless POST with the wrong content-type
      auto t0 = std::chrono::steady_clock::now();
      auto [rc, out] = run("curl -sS -i --http2-prior-knowledge -m 5 -X POST -H 'content-type: text/plain' " + base +
                           spark_service + "Config");
      INFO(out);
      CHECK(rc == 0);
      CHECK(out.find("HTTP/2 200") != std::string::npos);
      CHECK(out.find("grpc-status: 3") != std::string::npos);
      CHECK(out.find("text/plain") != std::string::npos);
      CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    }
    {  // HTTP/1.1 on the gRPC port: the connection ends, it does not hang
      auto t0 = std::chrono::steady_clock::now();
      auto [rc, out] = run("curl -sS -i --http1.1 -m 5 " + base + "/");
      INFO(rc << " " << out);
      CHECK(rc != 28);  // 28: curl's time-out
      CHECK(std::chrono::steady_clock::now() - t0 < 4s);
    }
  }
  // scg still serves real calls.
  grpc::Status s;
  CHECK(backend_for_session(gw.grpc_port, uuid_of("after-junk"), "ned", &s) == "fake-notgrpc");
  CHECK(s.ok());
  CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 3s));
  CHECK_FALSE(gw.proc.wait(0ms));
}

TEST_CASE("300 concurrent ExecutePlan streams on one connection all complete", "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-many-a");
  auto b = start_fake(dir, "fake-many-b");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "placement: { strategy: round_robin }\n"), "many");
  auto ch = channel_to(gw.grpc_port);
  auto stub = sc::SparkConnectService::NewStub(ch);
  REQUIRE(ch->WaitForConnected(std::chrono::system_clock::now() + 5s));

  // 50 new sessions, six streams each started together: the first message of
  // each resolves the session concurrently with its five siblings.
  constexpr int sessions = 50, per_session = 6;
  const std::map<std::string, std::string> md{
      {"x-fake-responses", "3"}, {"x-fake-delay-ms", "50"}, {"x-fake-payload-bytes", "1024"}};
  std::vector<std::unique_ptr<async_execute>> calls;
  for (int k = 0; k < per_session; ++k)
    for (int i = 0; i < sessions; ++i)
      calls.push_back(
          std::make_unique<async_execute>(*stub, execute(uuid_of("many-" + std::to_string(i)), "mo"), md, 60s));
  // While they run, scg counts them.
  CHECK(eventually(metric(gw.admin_port, "scg_forward_active_streams") >= 100, 3s));
  const bool all_done = wait_all(calls, 45s);
  CHECK(all_done);

  int ok = 0, right_count = 0;
  std::map<std::string, std::set<std::string>> backends_of;
  std::map<std::string, int> failures;
  for (std::size_t n = 0; n < calls.size(); ++n) {
    const auto& c = *calls[n];
    ok += c.status().ok();
    right_count += c.responses() == 4 && c.complete();
    if (!c.status().ok()) ++failures[std::to_string(c.status().error_code()) + " " + c.status().error_message()];
    backends_of["many-" + std::to_string(n % sessions)].insert(c.backend());
  }
  for (const auto& [why, count] : failures) UNSCOPED_INFO(count << " x " << why);
  CHECK(ok == sessions * per_session);
  CHECK(right_count == sessions * per_session);
  std::set<std::string> used;
  for (const auto& [session, names] : backends_of) {
    INFO(session);
    CHECK(names.size() == 1);  // the siblings agreed on one backend
    used.insert(names.begin(), names.end());
  }
  CHECK(used.size() == 2);
  // One client connection carried them all.
  CHECK(ch->GetState(false) == GRPC_CHANNEL_READY);
  CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 5s));
  CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 0);
  CHECK(backend_in_flight(gw.admin_port, "fake-many-a") == 0);
  CHECK(backend_in_flight(gw.admin_port, "fake-many-b") == 0);
  CHECK(eventually(metric(gw.admin_port, "scg_forward_rpcs_total{rpc=\"ExecutePlan\",code=\"OK\"}") ==
                       sessions * per_session,
                   3s));
  CHECK(fake_stat(a, "streams_cancelled") + fake_stat(b, "streams_cancelled") == 0);
}

TEST_CASE("a client that cancels mid-stream frees the call and the backend sees the cancellation",
          "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-cancel");
  auto gw = start_gateway(dir, gateway_yaml({&a}), "cancel");
  auto ch = channel_to(gw.grpc_port);
  auto stub = sc::SparkConnectService::NewStub(ch);
  REQUIRE(backend_for_session(gw.grpc_port, uuid_of("cancel-1"), "cy") == "fake-cancel");
  const std::map<std::string, std::string> slow{{"x-fake-responses", "200"}, {"x-fake-delay-ms", "100"}};

  {  // one long stream, cancelled after its first responses
    const auto before = fake_stat(a, "streams_cancelled");
    grpc::ClientContext ctx;
    for (const auto& [k, v] : slow) ctx.AddMetadata(k, v);
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    auto reader = stub->ExecutePlan(&ctx, execute(uuid_of("cancel-1"), "cy"));
    sc::ExecutePlanResponse r;
    REQUIRE(reader->Read(&r));
    REQUIRE(reader->Read(&r));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 1);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 1, 2s));
    const auto t0 = std::chrono::steady_clock::now();
    ctx.TryCancel();
    int extra = 0;
    while (reader->Read(&r) && extra < 1000) ++extra;
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_streams") == 0, 2s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_calls") == 0);
    CHECK(backend_in_flight(gw.admin_port, "fake-cancel") == 0);
    CHECK(eventually([&] { return fake_stat(a, "streams_cancelled") == before + 1; }, 3s));
    // Nothing more is produced for it; the span is the test (the stream made 10 responses a second).
    const auto out = fake_stat(a, "responses_out");
    std::this_thread::sleep_for(500ms);
    CHECK(fake_stat(a, "responses_out") == out);
  }
  {  // 40 long streams on one connection, all cancelled at once
    const auto before = fake_stat(a, "streams_cancelled");
    std::vector<std::unique_ptr<async_execute>> calls;
    for (int i = 0; i < 40; ++i)
      calls.push_back(std::make_unique<async_execute>(*stub, execute(uuid_of("cancel-1"), "cy"), slow, 60s));
    for (auto& c : calls) CHECK(c->wait_first(10s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 40);
    for (auto& c : calls) c->cancel();
    CHECK(wait_all(calls, 10s));
    int cancelled = 0;
    for (auto& c : calls) cancelled += c->status().error_code() == grpc::StatusCode::CANCELLED;
    CHECK(cancelled == 40);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_streams") == 0, 3s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_calls") == 0);
    CHECK(backend_in_flight(gw.admin_port, "fake-cancel") == 0);
    CHECK(eventually([&] { return fake_stat(a, "streams_cancelled") == before + 40; }, 3s));
  }
  {  // a call waiting on a backend that does not answer at all is freed too
    a.proc.signal(SIGSTOP);
    auto call = std::make_unique<async_execute>(*stub, execute(uuid_of("cancel-1"), "cy"), slow, 60s);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 1, 2s));
    CHECK_FALSE(call->wait(300ms));
    call->cancel();
    CHECK(call->wait(3s));
    a.proc.signal(SIGCONT);
    if (!call->wait(0ms)) call->wait(60s);
    CHECK(call->status().error_code() == grpc::StatusCode::CANCELLED);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 3s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 0);
    CHECK(backend_in_flight(gw.admin_port, "fake-cancel") == 0);
  }
  // The connection and the backend carry on.
  auto r = execute_plan(*stub, execute(uuid_of("cancel-1"), "cy"));
  INFO(r.status.error_message());
  CHECK(r.status.ok());
  CHECK(r.responses == 4);
}

TEST_CASE("a backend restarted on the same port is reconnected to", "[integration][h2]") {
  temp_dir dir;
  auto fake = start_fake_on(dir, "fake-phoenix", 0, 0, "phoenix-0");
  REQUIRE(fake);
  const int grpc_port = fake->grpc_port, ui_port = fake->ui_port;
  auto gw = start_gateway(dir, gateway_yaml({fake.get()}), "restart");
  auto ch = channel_to(gw.grpc_port);  // one client connection throughout: one worker, one upstream
  auto stub = sc::SparkConnectService::NewStub(ch);

  int generation = 0;
  for (int how : {SIGKILL, SIGTERM}) {
    INFO("killed with signal " << how);
    std::string b;
    sc::ConfigResponse before;
    REQUIRE(config(*stub, uuid_of("phoenix-1"), "pat", GRPC_COMPRESS_NONE, &b, &before).ok());
    REQUIRE(b == "fake-phoenix");
    // The upstream connection is now open and idle; the backend goes away.
    fake->proc.signal(how);
    REQUIRE(fake->proc.wait(5s).has_value());
    fake.reset();
    {  // while it is down: a quick UNAVAILABLE naming it
      std::string down;
      auto s = config(*stub, uuid_of("phoenix-1"), "pat", GRPC_COMPRESS_NONE, &down);
      INFO(s.error_message());
      CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
      CHECK(s.error_message().find("fake-phoenix") != std::string::npos);
    }
    fake = start_fake_on(dir, "fake-phoenix", grpc_port, ui_port, "phoenix-" + std::to_string(++generation));
    REQUIRE(fake);
    REQUIRE(fake->grpc_port == grpc_port);
    // The next call reaches the new process (its server-side session id is new).
    grpc::Status s;
    sc::ConfigResponse after;
    int attempts = 0;
    for (int i = 0; i < 10; ++i) {  // bounded: the first attempt should already succeed
      ++attempts;
      s = config(*stub, uuid_of("phoenix-1"), "pat", GRPC_COMPRESS_NONE, &b, &after);
      if (s.ok()) break;
      UNSCOPED_INFO("attempt " << i << ": " << s.error_message());
      std::this_thread::sleep_for(200ms);  // only after a failed attempt (which fails the test): a retry's back-off
    }
    INFO(s.error_message() << "\n" << log_tail(gw.proc.log_path()));
    CHECK(s.ok());
    CHECK(attempts == 1);
    CHECK(b == "fake-phoenix");
    CHECK(after.server_side_session_id().size() == 36);
    CHECK(after.server_side_session_id() != before.server_side_session_id());
    auto r = execute_plan(*stub, execute(uuid_of("phoenix-1"), "pat"));
    CHECK(r.status.ok());
    CHECK(r.responses == 4);
  }
  {  // killed in the middle of a stream: the client hears UNAVAILABLE naming the backend at once
    auto call = std::make_unique<async_execute>(*stub, execute(uuid_of("phoenix-1"), "pat"),
                                                std::map<std::string, std::string>{{"x-fake-responses", "200"},
                                                                                   {"x-fake-delay-ms", "100"}},
                                                60s);
    CHECK(call->wait_first(5s));
    const auto t0 = std::chrono::steady_clock::now();
    fake->proc.signal(SIGKILL);
    const bool ended = call->wait(3s);
    CHECK(ended);
    if (!ended) call->cancel();
    call->wait(60s);
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    INFO(call->status().error_message());
    CHECK(call->status().error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK(call->status().error_message().find("fake-phoenix") != std::string::npos);
    CHECK(call->responses() >= 1);
    CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 2s));
    CHECK(metric_value(gw.admin_port, "scg_forward_active_streams") == 0);
    CHECK(backend_in_flight(gw.admin_port, "fake-phoenix") == 0);
    REQUIRE(fake->proc.wait(5s).has_value());
    fake.reset();
    fake = start_fake_on(dir, "fake-phoenix", grpc_port, ui_port, "phoenix-" + std::to_string(++generation));
    REQUIRE(fake);
    auto r = execute_plan(*stub, execute(uuid_of("phoenix-1"), "pat"));
    INFO(r.status.error_message());
    CHECK(r.status.ok());
    CHECK(r.responses == 4);
  }
}

// When the backend sends a message over the limit, the responses scg holds
// for the client but has not framed yet still reach it, then the status.
TEST_CASE("a response over the limit comes after every response the backend sent before it",
          "[integration][h2]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-slowlimit");
  constexpr int limit = 65536;
  auto gw = start_gateway(dir, gateway_yaml({&a}, "limits: { max_message_bytes: " + std::to_string(limit) + " }\n"),
                          "slowlimit");
  auto ch = channel_to(gw.grpc_port);
  grpc::GenericStub generic(ch);
  sc::ConfigRequest first;
  first.set_session_id(uuid_of("slowlimit-1"));
  *first.mutable_user_context() = user("sol");
  {  // a reader that keeps up: [small, over the limit], 20 times
    int lost = 0;
    for (int i = 0; i < 20; ++i) {
      const std::vector<std::string> pair{first.SerializeAsString(), std::string(2 * limit, 'e')};
      raw_stream call(generic, spark_service + "SomeFutureRpc", pair, {{}, 10s, GRPC_COMPRESS_GZIP});
      auto [status, initial, trailing, responses] = call.get();
      CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
      lost += responses.empty();
    }
    INFO("the echo before the large one was lost in " << lost << " of 20 calls");
    CHECK(lost == 0);
  }
  // Behind a slow reader. An unknown method is echoed: 400 echoes under the
  // limit, then one over it (the requests, compressed, are small on the wire;
  // the echoes are not).
  std::vector<std::string> msgs{first.SerializeAsString()};
  for (int i = 0; i < 400; ++i) msgs.push_back(std::string(limit - 1000, static_cast<char>('a' + i % 26)));
  msgs.push_back(std::string(2 * limit, 'z'));
  const auto echoed_earlier = fake_stat(a, "bytes_out");
  raw_stream call(generic, spark_service + "SomeFutureRpc", msgs, {{}, 30s, GRPC_COMPRESS_GZIP, true});
  // The echoes back up (in the client, in scg, in the fake): the fake starts and then stops writing.
  CHECK(eventually([&] { return fake_stat(a, "bytes_out") > echoed_earlier; }, 5s));
  CHECK(settles([&] { return fake_stat(a, "bytes_out"); }, 300ms, 5s));
  const auto echoed_before = fake_stat(a, "bytes_out");
  // Backed up, scg holds at most the stream's window each way (W = 4 MiB) plus
  // a read burst and a read buffer per worker (docs/architecture.md, "Memory
  // held for slow peers"). What the fake wrote besides is the client's and the
  // fake's own buffering: no bound of scg's, so only shown.
  const long workers = std::max(1u, std::thread::hardware_concurrency());
  const long held = metric_value(gw.admin_port, "scg_buffered_bytes");
  INFO("scg_buffered_bytes " << held << " while backed up");
  CHECK(held <= 2 * (4L << 20) + workers * (5L << 18));
  call.begin_reading(1ms);
  auto [status, initial, trailing, responses] = call.get();
  const auto echoed = fake_stat(a, "bytes_out");
  std::size_t intact = 0, received = 0;
  for (std::size_t i = 0; i < responses.size() && i < msgs.size(); ++i) {
    intact += responses[i] == msgs[i];
    received += responses[i].size();
  }
  INFO(status.error_code() << " " << status.error_message() << "\nthe client got " << responses.size()
                           << " echoes (" << intact << " intact, " << received << " bytes); the fake wrote "
                           << echoed << " echo bytes (" << echoed_before
                           << " before the client began reading)");
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(status.error_message().find("limits.max_message_bytes") != std::string::npos);
  CHECK(intact == responses.size());
  CHECK(responses.size() == msgs.size() - 1);  // every echo under the limit
  CHECK(eventually(metric(gw.admin_port, "scg_forward_active_calls") == 0, 3s));
}
