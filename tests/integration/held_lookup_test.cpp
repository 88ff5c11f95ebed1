// A session whose calls reach replicas that have not yet heard of its
// binding (a client behind a round-robin balancer, each call carrying the
// server-side session id it observed): the key's owner answers, and no
// call waits on a search of every Spark server.
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/ids.hpp"
#include "core/rendezvous.hpp"
#include "core/session_key.hpp"
#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

/// What one Config through replica `port` got back.
struct config_answer {
  grpc::Status status;
  std::string backend;      ///< x-fake-backend
  std::string server_side;  ///< server_side_session_id
};

/// A Config of `session` (by `user_id`) through `port`, carrying `observed`
/// as client_observed_server_side_session_id when it is not empty.
config_answer config_call(int port, const std::string& session, const std::string& user_id,
                          const std::string& observed) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  if (!observed.empty()) req.set_client_observed_server_side_session_id(observed);
  sc::ConfigResponse resp;
  config_answer a;
  a.status = stub->Config(&ctx, req, &resp);
  a.backend = header(ctx, "x-fake-backend");
  a.server_side = resp.server_side_session_id();
  return a;
}

/// A fake backend's /fake/stats; null when it could not be read.
nlohmann::json fake_stats(const fake_spark& f) {
  auto [code, body] = http_get(f.ui_port, "/fake/stats");
  return code == 200 ? nlohmann::json::parse(body, nullptr, false) : nlohmann::json();
}

}  // namespace

TEST_CASE("sessions whose calls go round robin over three healthy replicas are never searched for on the servers",
          "[integration][cluster]") {
  cluster_env env(3);
  // Sessions the servers hold already (the health probe's, one per server).
  const auto sessions_created = [&env] {
    long n = 0;
    for (const auto& f : env.fakes) n += fake_stats(f).value("sessions_created", 0L);
    return n;
  };
  const long created_before = sessions_created();
  constexpr int sessions = 150;
  constexpr int clients = 3;
  std::mutex m;
  int failed = 0, moved = 0, unobserved = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < sessions; i += clients) {
        // The first call on one replica places the session; the client then
        // sends the next ones, at once, to the two others with the id it observed.
        const auto session = scg::core::new_uuid();
        auto first = config_call(env.replicas[i % 3]->grpc_port, session, "ursula", "");
        int f = !first.status.ok(), mv = 0;
        for (int k = 1; k < 3 && f == 0; ++k) {
          auto next = config_call(env.replicas[(i + k) % 3]->grpc_port, session, "ursula", first.server_side);
          f += !next.status.ok();
          mv += next.backend != first.backend;
        }
        std::lock_guard<std::mutex> lock(m);
        failed += f;
        moved += mv;
        unobserved += first.server_side.empty();
      }
    });
  for (auto& c : threads) c.join();
  CHECK(failed == 0);
  CHECK(moved == 0);
  CHECK(unobserved == 0);

  // No replica searched the servers; the replicas that missed a binding asked its owner.
  long searches = 0, lookups = 0, lookups_failed = 0;
  for (const auto& r : env.replicas) {
    searches += metric_value(r->admin_port, "scg_router_holder_searches_total");
    lookups += metric_value(r->admin_port, "scg_router_owner_lookups_total");
    lookups_failed += metric_value(r->admin_port, "scg_router_owner_lookups_failed_total");
  }
  INFO("searches " << searches << ", owner lookups " << lookups << " (" << lookups_failed << " unanswered)");
  CHECK(searches == 0);
  CHECK(lookups > 0);  // the calls did reach replicas without the binding
  CHECK(lookups_failed == 0);

  // Each session was seen by one server only: the sessions the servers
  // created add up to the test's, and no server was asked whether it held
  // one (a search's ReattachExecute; this test sends none itself).
  const long created = sessions_created() - created_before;
  long reattaches = 0;
  for (const auto& f : env.fakes) {
    auto stats = fake_stats(f);
    REQUIRE(stats.is_object());
    reattaches += stats.value("rpcs", nlohmann::json::object()).value("ReattachExecute", 0L);
  }
  INFO("sessions created " << created << ", ReattachExecute seen by the servers " << reattaches);
  CHECK(created == sessions);
  CHECK(reattaches == 0);
}

TEST_CASE("a replica whose key's owner predates the owner lookup searches the servers as before",
          "[integration][cluster]") {
  // Replica 1 announces protocol 3 (a build before `lookup`) and holds its
  // writes for a minute (test-only settings): replica 0 learns its bindings
  // only from the 2 s digests, and may not ask it.
  cluster_env env(0);
  env.add_replica({});
  auto& r0 = *env.replicas[0];
  env.replicas.push_back(std::make_unique<gateway>(start_gateway(
      env.dir, gateway_yaml({&env.fakes[0], &env.fakes[1], &env.fakes[2]}, cluster_block("scg-1", {r0.cluster_port})),
      "scg-1", scg_with_flags("--test-cluster-protocol 3 --test-flush-delay-ms 60000"))));
  auto& r1 = *env.replicas[1];
  REQUIRE(env.wait_for_mesh(10s));
  int sessions = 0, failed = 0, moved = 0;
  while (sessions < 5) {
    const auto session = scg::core::new_uuid();
    const auto key = scg::core::session_key{"default", "ursula", session}.str();
    if (scg::core::owner_of(key, {"scg-0", "scg-1"}) != "scg-1") continue;  // replica 1 decides it
    ++sessions;
    auto first = config_call(r1.grpc_port, session, "ursula", "");
    auto next = config_call(r0.grpc_port, session, "ursula", first.server_side);
    failed += !first.status.ok() + !next.status.ok();
    moved += next.backend != first.backend;
  }
  CHECK(failed == 0);
  CHECK(moved == 0);
  const auto searches = metric_value(r0.admin_port, "scg_router_holder_searches_total");
  INFO("searches " << searches);
  CHECK(metric_value(r0.admin_port, "scg_router_owner_lookups_total") == 0);
  CHECK(searches >= 1);  // a digest may have brought a binding first
  CHECK(searches <= sessions);
}
