// Replacing a Spark Connect server without breaking a call: a drained
// backend reports when nothing holds it on any replica (`scg drain --wait`),
// and the backend list follows its file without a SIGHUP (reload.watch_secs),
// including the symlink swap a Kubernetes ConfigMap update is.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tests/integration/harness.hpp"

using namespace scg::test;
namespace sc = spark::connect;

namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Replaces `path` with `text` in one rename, as an editor or a deploy tool would.
void replace_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".new") << text;
  REQUIRE(std::rename((path + ".new").c_str(), path.c_str()) == 0);
}

nlohmann::json backend_view(int admin_port, const std::string& name) {
  auto [code, body] = http_get(admin_port, "/api/v1/backends/" + name);
  return code == 200 ? nlohmann::json::parse(body) : nlohmann::json();
}

bool is_live(int admin_port, const std::string& name) {
  auto b = backend_view(admin_port, name);
  return b.is_object() && !b["removed"].get<bool>();
}

/// Sessions that each bind, run a query and release themselves, through one
/// replica, until stopped; every call's outcome and backend are recorded.
struct traffic {
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, failed{0};
  std::mutex mu;
  std::map<std::string, int> sessions_per_backend;
  std::map<std::string, std::int64_t> last_end_ms;    // by backend: when its last call ended
  std::map<std::string, std::int64_t> first_start_ms; // by backend: when its first call started
  std::vector<std::string> failures;
  std::vector<std::thread> threads;

  void record(const std::string& backend, std::int64_t started, const grpc::Status& s, const char* rpc) {
    ++calls;
    std::lock_guard lock{mu};
    if (!s.ok()) {
      ++failed;
      if (failures.size() < 10) failures.push_back(std::string(rpc) + " on " + backend + ": " + s.error_message());
    }
    auto& last = last_end_ms[backend];
    last = std::max(last, steady_ms());
    if (!first_start_ms.count(backend)) first_start_ms[backend] = started;
  }

  /// One session's life: Config, ExecutePlan (about 100 ms), ReleaseSession.
  void one_session(int port, const std::string& session) {
    auto stub = stub_to(port);
    std::string backend;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      sc::ConfigRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user("rio");
      sc::ConfigResponse resp;
      const auto t0 = steady_ms();
      auto s = stub->Config(&ctx, req, &resp);
      backend = header(ctx, "x-fake-backend");
      record(backend, t0, s, "Config");
      if (!s.ok()) return;
      std::lock_guard lock{mu};
      ++sessions_per_backend[backend];
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      ctx.AddMetadata("x-fake-delay-ms", "30");
      const auto t0 = steady_ms();
      auto reader = stub->ExecutePlan(&ctx, execute(session, "rio"));
      sc::ExecutePlanResponse r;
      bool complete = false;
      while (reader->Read(&r)) complete = complete || r.has_result_complete();
      auto s = reader->Finish();
      if (s.ok() && !complete) s = grpc::Status(grpc::StatusCode::DATA_LOSS, "no result_complete");
      record(header(ctx, "x-fake-backend"), t0, s, "ExecutePlan");
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      sc::ReleaseSessionRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user("rio");
      sc::ReleaseSessionResponse resp;
      const auto t0 = steady_ms();
      auto s = stub->ReleaseSession(&ctx, req, &resp);
      record(backend, t0, s, "ReleaseSession");
    }
  }

  void start(int port, const std::string& name, int n_threads) {
    for (int t = 0; t < n_threads; ++t)
      threads.emplace_back([this, port, name, t] {
        // Bounded: at most 6000 sessions or 300 s per thread (the test's waits add
        // up to about 150 s on a loaded machine; traffic must outlast them).
        const auto until = std::chrono::steady_clock::now() + 300s;
        for (int k = 0; k < 6000 && !stop && std::chrono::steady_clock::now() < until; ++k)
          one_session(port, uuid_of(name + "-" + std::to_string(t) + "-" + std::to_string(k)));
      });
  }

  void finish() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // A failed REQUIRE unwinds through here: join, or std::terminate hides the failure.
  ~traffic() { finish(); }

  int sessions_on(const std::string& backend) {
    std::lock_guard lock{mu};
    return sessions_per_backend.count(backend) ? sessions_per_backend[backend] : 0;
  }
};

}  // namespace

TEST_CASE("a backend is replaced under load with no failed call - drain --wait, stop, add through the watched file",
          "[integration][drain]") {
  cluster_env env(2, "drain: { idle_secs: 2 }\nreload: { watch_secs: 1 }\n");
  auto& r0 = *env.replicas[0];
  auto& r1 = *env.replicas[1];
  traffic load;
  load.start(r0.grpc_port, "via0", 2);
  load.start(r1.grpc_port, "via1", 2);
  REQUIRE(eventually([&] { return load.sessions_on("fake-a") >= 4; }, 20s));
  CHECK(backend_view(r0.admin_port, "fake-a")["drain"]["state"] == "serving");

  // Drain through replica 0 and wait: sessions reach fake-a through both replicas.
  process drain{{bin("scg"), "drain", "--wait", "--timeout", "60", "--admin",
                 "http://127.0.0.1:" + std::to_string(r0.admin_port), "fake-a"},
                env.dir.file("drain.out")};
  auto code = drain.wait(70s);
  const auto returned_ms = steady_ms();
  INFO(read_file(env.dir.file("drain.out")));
  REQUIRE(code == 0);
  CHECK(read_file(env.dir.file("drain.out")).find("safe to stop") != std::string::npos);
  std::int64_t last_on_a = 0;
  {
    std::lock_guard lock{load.mu};
    last_on_a = load.last_end_ms["fake-a"];
  }
  CHECK(last_on_a > 0);
  CHECK(last_on_a <= returned_ms);  // the last call on fake-a ended before it was called safe
  for (auto* r : {&r0, &r1}) {
    auto d = backend_view(r->admin_port, "fake-a")["drain"];
    INFO(d.dump());
    CHECK(d["state"] == "idle");
    CHECK(d["live_operations"] == 0);
    CHECK(d["active_sessions"] == 0);
    CHECK(metric_value(r->admin_port, "scg_backend_drain_idle{backend=\"fake-a\"}") == 1);
  }
  CHECK(metric_value(r0.admin_port, "scg_backend_drain_idle{backend=\"fake-b\"}") == 0);

  // Stop its server (by pid); traffic carries on on the others.
  env.fakes[0].proc.signal(SIGTERM);
  REQUIRE(env.fakes[0].proc.wait(10s) == 0);
  const int calls_before = load.calls;
  REQUIRE(eventually([&] { return load.calls >= calls_before + 20; }, 20s));

  // Its replacement joins through the watched file: no SIGHUP.
  auto a2 = start_fake(env.dir, "fake-a2");
  replace_file(env.dir.file("scg-0.yaml"), gateway_yaml({&env.fakes[1], &env.fakes[2], &a2},
                                                        env.extra_yaml + cluster_block("scg-0", {})));
  replace_file(env.dir.file("scg-1.yaml"), gateway_yaml({&env.fakes[1], &env.fakes[2], &a2},
                                                        env.extra_yaml + cluster_block("scg-1", {r0.cluster_port})));
  REQUIRE(eventually([&] { return is_live(r0.admin_port, "fake-a2") && is_live(r1.admin_port, "fake-a2"); }, 10s));
  REQUIRE(eventually([&] { return load.sessions_on("fake-a2") >= 4; }, 20s));
  load.finish();

  INFO("failures: " << [&] {
    std::string all;
    for (const auto& f : load.failures) all += f + "; ";
    return all;
  }());
  CHECK(load.failed == 0);
  CHECK(load.calls > 100);
  for (auto* r : {&r0, &r1}) {
    CHECK(metric_value(r->admin_port, "scg_config_reloads_total") == 1);
    CHECK(metric_value(r->admin_port, "scg_config_reload_failures_total") == 0);
  }
  CHECK(backend_view(r0.admin_port, "fake-a")["removed"] == true);
}

TEST_CASE("scg drain refuses an unknown backend and times out naming what holds a busy one",
          "[integration][drain]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-a");
  auto b = start_fake(dir, "fake-b");
  auto gw = start_gateway(dir, gateway_yaml({&a, &b}, "drain: { idle_secs: 30 }\n"), "scg");
  const std::string admin = "http://127.0.0.1:" + std::to_string(gw.admin_port);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {bin("scg"), "drain"});
    std::remove(dir.file("drain.out").c_str());
    process p{args, dir.file("drain.out")};
    auto code = p.wait(20s);
    return std::pair{code.value_or(-999), read_file(dir.file("drain.out"))};
  };
  auto [unknown_code, unknown_out] = run({"--admin", admin, "no-such"});
  CHECK(unknown_code == 3);
  CHECK(unknown_out.find("no backend named no-such") != std::string::npos);

  // A session used just now holds its backend for drain.idle_secs.
  const auto on = backend_for_session(gw.grpc_port, uuid_of("held"), "rio");
  REQUIRE(!on.empty());
  auto [busy_code, busy_out] = run({"--wait", "--timeout", "2", "--admin", admin, on});
  CHECK(busy_code == 1);
  CHECK(busy_out.find("timed out after 2 s") != std::string::npos);
  CHECK(busy_out.find("1 active session") != std::string::npos);
  auto d = backend_view(gw.admin_port, on)["drain"];
  CHECK(d["state"] == "draining");
  CHECK(d["active_sessions"] == 1);
  CHECK(d["last_activity_secs"].get<int>() <= 5);
  CHECK(metric_value(gw.admin_port, "scg_backend_active_sessions{backend=\"" + on + "\"}") == 1);
  CHECK(metric_value(gw.admin_port, "scg_backend_drain_idle{backend=\"" + on + "\"}") == 0);

  auto [undrain_code, undrain_out] = run({"--undrain", "--admin", admin, on});
  CHECK(undrain_code == 0);
  CHECK(backend_view(gw.admin_port, on)["drain"]["state"] == "serving");
}

TEST_CASE("the watched config file follows a ConfigMap symlink swap and keeps the running list on a bad one",
          "[integration][reload]") {
  temp_dir dir;
  auto a = start_fake(dir, "fake-a");
  auto b = start_fake(dir, "fake-b");
  // The kubelet's layout: config.yaml -> ..data/config.yaml, ..data -> ..2026_N.
  const std::string cm = dir.file("configmap");
  REQUIRE(::mkdir(cm.c_str(), 0755) == 0);
  int version = 0;
  auto publish = [&](const std::string& text) {
    const std::string next = "..2026_" + std::to_string(++version);
    REQUIRE(::mkdir((cm + "/" + next).c_str(), 0755) == 0);
    std::ofstream(cm + "/" + next + "/config.yaml") << text;
    REQUIRE(::symlink(next.c_str(), (cm + "/..data_tmp").c_str()) == 0);
    REQUIRE(std::rename((cm + "/..data_tmp").c_str(), (cm + "/..data").c_str()) == 0);
    if (version == 1) REQUIRE(::symlink("..data/config.yaml", (cm + "/config.yaml").c_str()) == 0);
  };
  const std::string extra = "reload: { watch_secs: 1 }\n" + open_admin_yaml;
  publish(gateway_yaml({&a}, extra));
  const auto log = dir.file("scg.log");
  process p{{bin("scg"), "--config", cm + "/config.yaml", "--port-file", dir.file("scg.ports")}, log};
  const auto ports = wait_for_json_file(dir.file("scg.ports"), 10s);
  const int admin = ports.at("admin").get<int>();
  REQUIRE(is_live(admin, "fake-a"));
  CHECK(backend_view(admin, "fake-b").is_null());

  publish(gateway_yaml({&a, &b}, extra));
  REQUIRE(eventually([&] { return is_live(admin, "fake-b"); }, 8s));
  CHECK(metric_value(admin, "scg_config_reloads_total") == 1);
  CHECK(read_file(log).find("config_file_changed") != std::string::npos);

  // A file that does not parse changes nothing and is logged once, however often it is looked at.
  publish(gateway_yaml({&b}, extra) + "placement: { strategy: fastest }\n");
  REQUIRE(eventually(metric(admin, "scg_config_reload_failures_total") == 1, 8s));
  std::this_thread::sleep_for(3s);  // three more looks at the same bad file
  CHECK(metric_value(admin, "scg_config_reload_failures_total") == 1);
  CHECK(occurrences(read_file(log), "reload_rejected") == 1);
  CHECK(is_live(admin, "fake-a"));
  CHECK(is_live(admin, "fake-b"));

  publish(gateway_yaml({&b}, extra));
  REQUIRE(eventually([&] { return backend_view(admin, "fake-a")["removed"] == true; }, 8s));
  CHECK(metric_value(admin, "scg_config_reloads_total") == 2);
  p.signal(SIGTERM);
  CHECK(p.wait(10s) == 0);
}
