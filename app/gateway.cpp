#include "app/gateway.hpp"

#include <absl/synchronization/mutex.h>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <fstream>

#include "actors/router.hpp"
#include "cluster/cluster.hpp"
#include "net/admin_http.hpp"
#include "net/front_door.hpp"

namespace scg::app {

void setup_logging(const std::string& level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  for (const char* name : {"main", "forward", "router", "backend", "admin", "cluster", "audit"}) {
    if (spdlog::get(name)) continue;
    auto logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %n %v");
    logger->set_level(spdlog::level::from_str(level));
    spdlog::register_logger(logger);
  }
}

namespace {

void write_port_file(const std::string& path, int grpc_port, int admin_port, int cluster_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"grpc", grpc_port}, {"admin", admin_port}, {"cluster", cluster_port}}.dump()
        << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

/// Waits for SIGTERM or SIGINT; SIGHUP is logged and ignored for now.
int wait_for_stop_signal() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig != SIGHUP) return sig;
    spdlog::get("main")->warn("sighup_ignored reason=\"reloading the backend list is not supported yet\"");
  }
}

}  // namespace

int run_gateway(const config::gateway& cfg, const std::string& port_file) {
  auto log = spdlog::get("main");
  // Debian's abseil is built without NDEBUG: its mutex deadlock detection
  // costs a few percent of every call (PERFORMANCE-NOTES.md).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", 2);
  // Work sharing sleeps on a condition variable when idle; CAF's default
  // work stealing polls (about 0.05 cores of an idle replica).
  caf_cfg.set("scheduler.policy", caf::atom("sharing"));
  if (cfg.cluster) cluster::configure(caf_cfg, *cfg.cluster);
  caf::actor_system sys{caf_cfg};
  sys.await_actors_before_shutdown(false);

  actors::backend_list backends;
  for (const auto& b : cfg.backends)
    backends.push_back(actors::make_backend(b.name, b.address, b.ui_url,
                                            cfg.limits.max_message_bytes,
                                            cfg.limits.connect_timeout_ms));
  auto table = std::make_shared<actors::session_table>(backends.size());
  actors::router router{sys, cfg, table, backends};

  net::forward_context fx;
  fx.backends = backends;
  fx.table = table;
  fx.router = &router;
  fx.lost_after_ms = std::int64_t{cfg.on_backend_lost.after_secs} * 1000;
  fx.rebind_lost = cfg.on_backend_lost.action == "rebind";

  net::admin_view view;
  view.backends = backends;
  view.table = table;
  view.policy = actors::make_policy(cfg.placement);
  view.set_draining = [&router](const std::string& name, bool on) { router.set_draining(name, on); };
  int cluster_port = 0;
  if (cfg.cluster) {
    view.node_name = cfg.cluster->node_name;
    view.cluster = std::make_shared<cluster::cluster_view>();
    view.synced = false;
    cluster_port = cluster::start(sys, *cfg.cluster, cfg.affinity, table, backends, router.actor(), view.cluster,
                                  [&view] { view.synced = true; });
    if (cluster_port == 0) return 1;
  }

  try {
    net::front_door door{cfg, fx};
    std::unique_ptr<net::admin_http> admin;
    if (cfg.admin_addr) admin = std::make_unique<net::admin_http>(*cfg.admin_addr, view);
    view.ready = true;
    log->info("listening grpc_port={} admin_port={} backends={}", door.port(),
              admin ? admin->port() : 0, backends.size());
    if (!port_file.empty()) write_port_file(port_file, door.port(), admin ? admin->port() : 0, cluster_port);

    int sig = wait_for_stop_signal();
    view.ready = false;
    router.stop_new_sessions();
    log->info("draining signal={} deadline_secs={}", sig, cfg.shutdown.deadline_secs);
    door.shutdown(std::chrono::system_clock::now() +
                  std::chrono::seconds(cfg.shutdown.deadline_secs));
    log->info("stopped");
  } catch (const std::exception& e) {
    log->error("startup_failed reason=\"{}\"", e.what());
    return 1;
  }
  return 0;
}

}  // namespace scg::app
