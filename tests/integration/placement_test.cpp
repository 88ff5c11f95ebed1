// Load-aware placement and backend lifecycle with scg-fake-spark loads set
// at run time: the score's effect, its reaction time, dead backends, bad
// Spark UI answers.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <csignal>
#include <map>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

void set_load(const fake_spark& f, int slots, int active, int pending) {
  auto body = nlohmann::json{{"slots", slots}, {"active", active}, {"pending", pending}}.dump();
  REQUIRE(http_post(f.ui_port, "/fake/load", body).first == 200);
}

std::map<std::string, double> utilizations(const gateway& gw) {
  std::map<std::string, double> out;
  const auto view = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
  for (const auto& b : view["backends"])
    out[b["name"]] = b["utilization"].is_null() ? -1.0 : b["utilization"].get<double>();
  return out;
}

std::map<std::string, int> place_new(const gateway& gw, const std::string& prefix, int n) {
  std::map<std::string, int> out;
  for (int i = 0; i < n; ++i) ++out[backend_for_session(gw.grpc_port, uuid_of(prefix + std::to_string(i)), "vic")];
  return out;
}

/// An HTTP server on loopback that answers every GET with `status` and `body`:
/// a Spark UI gone wrong.
class bad_ui {
 public:
  bad_ui(int status, std::string body) {
    srv_.Get(".*", [status, body](const httplib::Request&, httplib::Response& res) {
      res.status = status;
      res.set_content(body, "application/json");
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
  }
  ~bad_ui() {
    srv_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("backends at 90 %, 10 % and 50 % utilization take new sessions in that order, and a flip "
          "shows within 3 poll intervals",
          "[integration][placement]") {
  temp_dir dir;
  auto busy = start_fake(dir, "fake-90");
  auto idle = start_fake(dir, "fake-10");
  auto half = start_fake(dir, "fake-50");
  // Weights that let both terms show: with these the score levels out at
  // about 30 / 20 / 10 sessions for 60 new ones (docs/placement.md works it out).
  const int poll_ms = 400;
  auto gw = start_gateway(dir,
                          gateway_yaml({&busy, &idle, &half},
                                       "placement: { poll_interval_ms: " + std::to_string(poll_ms) +
                                           ", ewma_alpha: 0.3, utilization_weight: 0.3, session_weight: 0.7, "
                                           "session_cap: 60 }\n"),
                          "ninety-ten");
  set_load(busy, 10, 9, 0);
  set_load(idle, 10, 1, 0);
  set_load(half, 10, 5, 0);
  REQUIRE(eventually([&] {
    auto u = utilizations(gw);
    return std::abs(u["fake-90"] - 0.9) < 0.01 && std::abs(u["fake-10"] - 0.1) < 0.01 &&
           std::abs(u["fake-50"] - 0.5) < 0.01;
  }, 20s));  // the EWMA starts at the first sample and needs no warm-up
  auto placed = place_new(gw, "ten-", 60);
  INFO("fake-10 " << placed["fake-10"] << ", fake-50 " << placed["fake-50"] << ", fake-90 " << placed["fake-90"]);
  CHECK(placed["fake-10"] > placed["fake-50"]);
  CHECK(placed["fake-50"] > placed["fake-90"]);
  CHECK(std::abs(placed["fake-10"] - 30) <= 3);
  CHECK(std::abs(placed["fake-50"] - 20) <= 3);
  CHECK(std::abs(placed["fake-90"] - 10) <= 3);

  // Flip: the busy one idles and the idle one gets busy.
  set_load(busy, 10, 1, 0);
  set_load(idle, 10, 9, 0);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] {
    auto u = utilizations(gw);
    return u["fake-90"] < u["fake-50"] && u["fake-50"] < u["fake-10"];
  }, 10s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  INFO("the order flipped after " << took.count() << " ms");
  CHECK(took.count() <= 3 * poll_ms + 250);  // 3 polls, plus the time of a poll and of this check
  placed = place_new(gw, "flip-", 20);
  CHECK(placed["fake-90"] >= 15);
  CHECK(placed["fake-10"] == 0);
}

TEST_CASE("a killed backend gets no new sessions within 2 probe intervals - calls in flight end UNAVAILABLE "
          "and its sessions are rebound",
          "[integration][placement]") {
  temp_dir dir;
  auto doomed = std::make_unique<fake_spark>(start_fake(dir, "fake-doomed"));
  auto spare = start_fake(dir, "fake-spare");
  const int probe_ms = 300;
  auto gw = start_gateway(dir,
                          gateway_yaml({doomed.get(), &spare},
                                       "health: { interval_ms: " + std::to_string(probe_ms) +
                                           ", timeout_ms: 250, failures: 1, successes: 2 }\n"
                                           "on_backend_lost: { after_secs: 1, action: rebind }\n"),
                          "killed");
  std::vector<std::string> on_doomed;
  for (int i = 0; i < 10; ++i)
    if (const auto s = uuid_of("k-" + std::to_string(i)); backend_for_session(gw.grpc_port, s, "vic") == "fake-doomed")
      on_doomed.push_back(s);
  REQUIRE(!on_doomed.empty());

  // A query streaming from the backend when it dies.
  auto stub = stub_to(gw.grpc_port);
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-fake-responses", "100");
  ctx.AddMetadata("x-fake-delay-ms", "50");
  auto reader = stub->ExecutePlan(&ctx, execute(on_doomed[0], "vic"));
  sc::ExecutePlanResponse r;
  REQUIRE(reader->Read(&r));

  doomed->proc.signal(SIGKILL);
  REQUIRE(doomed->proc.wait(5s));
  const auto killed = std::chrono::steady_clock::now();
  while (reader->Read(&r)) {
  }
  auto status = reader->Finish();
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);

  // The deadline is the test: two probe intervals after the kill, no new session goes there.
  std::this_thread::sleep_until(killed + std::chrono::milliseconds(2 * probe_ms));
  auto placed = place_new(gw, "after-kill-", 10);
  CHECK(placed["fake-doomed"] == 0);
  CHECK(placed["fake-spare"] == 10);

  std::this_thread::sleep_until(killed + 1500ms);  // the deadline is the test: lost after 1 s, moved by 1.5 s
  for (const auto& s : on_doomed) CHECK(backend_for_session(gw.grpc_port, s, "vic") == "fake-spare");
  CHECK(metric_value(gw.admin_port, "scg_router_rebinds_total") == static_cast<long>(on_doomed.size()));
}

TEST_CASE("Spark UI errors and garbage JSON are counted and survived", "[integration][placement]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-garbage");
  auto b = start_fake(dir, "fake-500");
  bad_ui garbage(200, "{\"not\": json at all");
  bad_ui failing(500, "{\"error\": \"boom\"}");
  std::string yaml = "bind_addr: \"127.0.0.1:0\"\nadmin_addr: \"127.0.0.1:0\"\nplacement: { poll_interval_ms: 100 }\n"
                     "backends:\n"
                     "  - { name: fake-garbage, address: \"" + a.address() + "\", ui_url: \"" + garbage.url() + "\" }\n"
                     "  - { name: fake-500, address: \"" + b.address() + "\", ui_url: \"" + failing.url() + "\" }\n";
  auto gw = start_gateway(dir, yaml, "bad-ui");
  // Counters: once both have reached 5 they stay there, so two waits in turn.
  REQUIRE(eventually(metric(gw.admin_port, "scg_backend_poll_errors_total{backend=\"fake-garbage\"}") >= 5, 10s));
  REQUIRE(eventually(metric(gw.admin_port, "scg_backend_poll_errors_total{backend=\"fake-500\"}") >= 5, 10s));
  auto u = utilizations(gw);
  CHECK(u["fake-garbage"] == -1.0);  // scored on sessions alone
  CHECK(u["fake-500"] == -1.0);
  auto placed = place_new(gw, "bad-ui-", 10);
  CHECK(placed["fake-garbage"] == 5);  // sessions alone: an even split
  CHECK(placed["fake-500"] == 5);
  CHECK_FALSE(gw.proc.wait(std::chrono::milliseconds(0)).has_value());  // alive
}
