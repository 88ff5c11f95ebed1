// Several replicas behave as one gateway: shared bindings, one decision per
// new session, no single replica matters.
#include <catch2/catch.hpp>

#include <csignal>
#include <random>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

std::string cluster_block(const std::string& node, const std::vector<int>& seed_ports) {
  std::string y = "cluster:\n  node_name: " + node + "\n  bind_addr: \"127.0.0.1:0\"\n  seeds: [";
  for (std::size_t i = 0; i < seed_ports.size(); ++i)
    y += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(seed_ports[i]) + "\"";
  return y + "]\n  sync_wait_secs: 3\n";
}

/// Backends and replicas on loopback: replica 0 first, the others seeded from it.
struct cluster_env {
  temp_dir dir;
  std::vector<fake_spark> fakes;
  std::vector<std::unique_ptr<gateway>> replicas;

  explicit cluster_env(int n_replicas) {
    for (const char* name : {"fake-a", "fake-b", "fake-c"}) fakes.push_back(start_fake(dir, name));
    for (int i = 0; i < n_replicas; ++i) add_replica(i == 0 ? std::vector<int>{} : std::vector<int>{replicas[0]->cluster_port});
    REQUIRE(wait_for_mesh(10s));
  }

  gateway& add_replica(const std::vector<int>& seeds) {
    std::string name = "scg-" + std::to_string(replicas.size());
    replicas.push_back(std::make_unique<gateway>(start_gateway(
        dir, gateway_yaml({&fakes[0], &fakes[1], &fakes[2]}, cluster_block(name, seeds)), name)));
    return *replicas.back();
  }

  /// Every live replica sees every other live one up.
  bool wait_for_mesh(std::chrono::milliseconds timeout) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (std::chrono::steady_clock::now() >= until) {
        for (auto& r : replicas)
          if (r) UNSCOPED_INFO("readyz " << http_get(r->admin_port, "/readyz").first << " "
                                         << http_get(r->admin_port, "/api/v1/cluster").second);
        return false;
      }
      bool all = true;
      std::size_t live = 0;
      for (auto& r : replicas) live += r != nullptr;
      for (auto& r : replicas) {
        if (!r) continue;
        auto [code, body] = http_get(r->admin_port, "/api/v1/cluster");
        if (code != 200) { all = false; break; }
        std::size_t up = 0;
        auto view = nlohmann::json::parse(body);
        for (const auto& m : view["members"]) up += m["status"] != "down";
        all = all && up == live && http_get(r->admin_port, "/readyz").first == 200;
      }
      if (all) return true;
      std::this_thread::sleep_for(100ms);
    }
  }
};

std::string config_backend(int port, const std::string& session, grpc::Status* status = nullptr) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user("ursula");
  sc::ConfigResponse resp;
  auto s = stub->Config(&ctx, req, &resp);
  if (status) *status = s;
  return s.ok() ? header(ctx, "x-fake-backend") : std::string();
}

}  // namespace

TEST_CASE("three replicas: every rpc of 200 sessions at a random replica keeps its backend",
          "[integration][cluster]") {
  cluster_env env(3);
  std::mt19937 rng(7);
  std::map<std::string, std::string> bound;
  int changes = 0, failures = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 200; ++i) {
      const std::string session = "c200-" + std::to_string(i);
      auto& r = *env.replicas[rng() % 3];
      grpc::Status s;
      auto b = config_backend(r.grpc_port, session, &s);
      failures += !s.ok();
      auto [it, fresh] = bound.emplace(session, b);
      changes += !fresh && it->second != b;
    }
  }
  CHECK(failures == 0);
  CHECK(changes == 0);
  std::set<std::string> used;
  for (const auto& [s, b] : bound) used.insert(b);
  CHECK(used.size() == 3);
}

TEST_CASE("the first rpc of a new session at two replicas at once gets one backend",
          "[integration][cluster]") {
  cluster_env env(3);
  int disagreements = 0, failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::string session = "race-" + std::to_string(trial);
    int a = trial % 3, b = (trial + 1) % 3;
    std::string ba, bb;
    std::atomic<int> ready{0};
    auto call = [&](int replica, std::string& out) {
      auto stub = stub_to(env.replicas[replica]->grpc_port);
      ready++;
      while (ready < 2) std::this_thread::yield();
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 5s);
      sc::ConfigRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user("vera");
      sc::ConfigResponse resp;
      if (stub->Config(&ctx, req, &resp).ok()) out = header(ctx, "x-fake-backend");
    };
    std::thread t1(call, a, std::ref(ba)), t2(call, b, std::ref(bb));
    t1.join();
    t2.join();
    failures += ba.empty() || bb.empty();
    disagreements += ba != bb;
  }
  CHECK(failures == 0);
  CHECK(disagreements == 0);
}
