#include "app/gateway.hpp"

#include <sys/resource.h>

#include <absl/synchronization/mutex.h>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>

#include "actors/backend_set.hpp"
#include "actors/drain_status.hpp"
#include "config/file_watch.hpp"
#include "actors/router.hpp"
#include "core/allocator.hpp"
#include "auth/admin_auth.hpp"
#include "auth/authenticator.hpp"
#include "auth/rate_limit.hpp"
#include "core/clock.hpp"
#include "discovery/k8s_discovery.hpp"
#include "core/log_format.hpp"
#include "core/metrics.hpp"
#include "core/sched_slice.hpp"
#include "core/usage.hpp"
#include "net/span_exporter.hpp"
#include "cluster/cluster.hpp"
#include "admin/admin_http.hpp"
#include "admin/admin_server.hpp"
#include "admin/drain_report.hpp"
#include "net/front_door.hpp"
#include "net/session_journal.hpp"

namespace scg::app {

namespace {

spdlog::level::level_enum spdlog_level(config::log_level level) {
  using config::log_level;
  switch (level) {
    case log_level::trace: return spdlog::level::trace;
    case log_level::debug: return spdlog::level::debug;
    case log_level::info: return spdlog::level::info;
    case log_level::warn: return spdlog::level::warn;
    case log_level::error: return spdlog::level::err;
    case log_level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void setup_logging(const config::logging& cfg) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  for (const char* name : {"main", "forward", "router", "backend", "admin", "cluster", "audit"}) {
    if (spdlog::get(name)) continue;
    auto logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %n %v");
    logger->set_level(spdlog_level(cfg.level));
    spdlog::register_logger(logger);
  }
  core::set_log_format(cfg.format);
}

namespace {

/// Every client connection is a descriptor: the soft open-file limit most
/// services start with (1024) is raised to the hard one, and logged.
void raise_open_file_limit(spdlog::logger& log) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const auto was = lim.rlim_cur;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = was;
  }
  auto n = [](rlim_t v) { return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v); };
  log.info("open_file_limit soft={} hard={} raised_from={}", n(lim.rlim_cur), n(lim.rlim_max), n(was));
}

void write_port_file(const std::string& path, int grpc_port, int admin_port, int probe_port, int cluster_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"grpc", grpc_port}, {"admin", admin_port}, {"probe", probe_port}, {"cluster", cluster_port}}
               .dump()
        << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

/// Keeps the running backend set (the shared registry) in step with the
/// configured one: at start, on SIGHUP and when `resolve: all` names are
/// re-resolved. Runs on the main thread only.
class backend_keeper {
 public:
  backend_keeper(const config::gateway& cfg, actors::backend_list backends)
      : limits_(cfg.limits), backends_(std::move(backends)), entries_(cfg.backends),
        refresh_secs_(cfg.backend_refresh_secs) {}

  /// Makes the running set match `entries` (the router starts the actors of
  /// new backends; before the router exists, it starts them all itself).
  void apply(std::vector<config::backend> entries, const actors::router* router) {
    entries_ = std::move(entries);
    auto wanted = actors::expand(entries_, actors::resolve_host);
    wanted.specs.insert(wanted.specs.end(), discovered_.begin(), discovered_.end());
    for (const auto& name : wanted.unresolved) {
      core::bump(core::global_metrics().backend_resolve_failures_total);
      log_->warn("backend_unresolved entry={} reason=\"the name did not resolve; its backends stay as they were\"",
                 name);
    }
    std::vector<actors::running_backend> running;
    for (const auto& b : backends_) running.push_back({{b->name, b->address, b->ui_url}, b->removed.load()});
    using kind = actors::backend_change::kind;
    for (const auto& c : actors::plan_changes(running, wanted)) {
      if (c.what == kind::add) {
        auto index = backends_.push_back(
            actors::make_backend(c.spec.name, c.spec.address, c.spec.ui_url, limits_.max_message_bytes,
                                 limits_.connect_timeout_ms));
        if (!index) {
          log_->error("backend_not_added backend={} reason=\"{} backends known since start: restart to add more\"",
                      c.spec.name, actors::backend_list::capacity);
          continue;
        }
        core::bump(core::global_metrics().backends_added_total);
        if (router) router->add_backend(*index);
      } else {
        backends_[c.index]->removed = c.what == kind::remove;
        if (c.what == kind::remove) core::bump(core::global_metrics().backends_removed_total);
      }
      const char* verb = c.what == kind::add ? "added" : c.what == kind::remove ? "removed" : "restored";
      log_->info("backend_{} backend={} address={}", verb, c.spec.name, c.spec.address);
    }
  }

  /// SIGHUP (or the watched file changed): reads `path` again; a file that
  /// does not parse changes nothing.
  void reload(const std::string& path, const actors::router& router) {
    auto loaded = config::load(path);
    if (auto* err = std::get_if<config::error>(&loaded)) {
      core::bump(core::global_metrics().config_reload_failures_total);
      log_->error("reload_rejected file={} reason=\"{}\" action=\"kept the running configuration\"", path,
                  err->to_string());
      return;
    }
    core::bump(core::global_metrics().config_reloads_total);
    log_->info("reload file={} backends={} note=\"only the backends list is reloaded; other settings need a restart\"",
               path, std::get<config::gateway>(loaded).backends.size());
    apply(std::get<config::gateway>(loaded).backends, &router);
  }

  /// Re-resolves the `resolve: all` names.
  void refresh(const actors::router& router) { apply(entries_, &router); }

  /// The ready endpoints backend_discovery reports now (they join the
  /// configured list; a reload keeps them).
  void set_discovered(std::vector<actors::backend_spec> specs, const actors::router& router) {
    discovered_ = std::move(specs);
    apply(entries_, &router);
  }

  /// Takes what the discovery thread reported since the last call, if anything.
  void take_discovered(const actors::router& router) {
    std::optional<std::vector<actors::backend_spec>> latest;
    {
      std::lock_guard lock{pending_mutex_};
      latest.swap(pending_);
    }
    if (latest) set_discovered(std::move(*latest), router);
  }

  /// Called from the discovery thread: applied by the main thread within a second.
  void post_discovered(std::vector<actors::backend_spec> specs) {
    std::lock_guard lock{pending_mutex_};
    pending_ = std::move(specs);
  }

  /// How long to wait before refresh() is due; nullopt without `resolve: all` entries.
  std::optional<int> refresh_secs() const {
    for (const auto& e : entries_)
      if (e.resolve_all) return refresh_secs_;
    return std::nullopt;
  }

 private:
  config::limits limits_;
  actors::backend_list backends_;
  std::vector<config::backend> entries_;
  int refresh_secs_;
  std::vector<actors::backend_spec> discovered_;
  std::mutex pending_mutex_;
  std::optional<std::vector<actors::backend_spec>> pending_;
  std::shared_ptr<spdlog::logger> log_ = spdlog::get("main");
};

/// While a backend is drained, publishes this replica's activity on it to
/// its peers (when it changes, and every activity_refresh_ms so they know
/// the report is current); retracts it on undrain. Main thread only.
class drain_reporter {
 public:
  drain_reporter(actors::backend_list backends, std::shared_ptr<actors::session_table> table,
                 const net::execution_ledger& executions, std::int64_t idle_ms, const actors::router& router)
      : backends_(std::move(backends)), table_(std::move(table)), executions_(executions), idle_ms_(idle_ms),
        router_(router) {}

  void tick() {
    const auto now = core::wall_now_ms();
    for (std::size_t i = 0; i < backends_.size(); ++i) {
      const auto& b = *backends_[i];
      if (actors::find_backend(backends_, b.name) != i) continue;  // superseded by a newer entry
      auto it = sent_.find(b.name);
      if (!b.draining.load()) {
        if (it == sent_.end()) continue;
        router_.publish_activity(b.name, "");
        sent_.erase(it);
        continue;
      }
      auto a = admin::local_activity(backends_, *table_, executions_, static_cast<actors::backend_index>(i), idle_ms_);
      if (it != sent_.end() && it->second.first == a && now - it->second.second < actors::activity_refresh_ms)
        continue;
      router_.publish_activity(b.name, actors::encode_activity(a));
      sent_[b.name] = {a, now};
    }
  }

 private:
  actors::backend_list backends_;
  std::shared_ptr<actors::session_table> table_;
  const net::execution_ledger& executions_;
  std::int64_t idle_ms_;
  const actors::router& router_;
  std::map<std::string, std::pair<actors::activity, std::int64_t>> sent_;  // by backend: report, when
};

/// Waits for SIGTERM or SIGINT and returns it; meanwhile reloads the backend
/// set on SIGHUP or when `watch` sees the file change (every `watch_secs`),
/// reads the admin token files again (`reread_secrets`: on SIGHUP and every
/// `watch_secs`), re-resolves `resolve: all` names when due, publishes drain
/// reports and lets the authenticator refresh OIDC keys (off the request path).
int wait_for_stop_signal(backend_keeper& keeper, const std::string& config_path, const actors::router& router,
                         auth::authenticator& auth, config::file_watch* watch, int watch_secs,
                         drain_reporter* reporter, const std::function<void()>& reread_secrets,
                         const std::function<void()>& every_second) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  auto next_refresh = std::chrono::steady_clock::now();
  auto next_watch = next_refresh + std::chrono::seconds(watch_secs);
  for (;;) {
    if (auto release = core::allocator().release_freed) release();
    auth.tick();
    every_second();
    keeper.take_discovered(router);
    if (reporter) reporter->tick();
    if (watch && std::chrono::steady_clock::now() >= next_watch) {
      next_watch = std::chrono::steady_clock::now() + std::chrono::seconds(watch_secs);
      reread_secrets();
      if (watch->changed()) {
        spdlog::get("main")->info("config_file_changed file={} reason=\"reload.watch_secs saw new contents\"",
                                  config_path);
        keeper.reload(config_path, router);
      }
    }
    if (auto every = keeper.refresh_secs()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_refresh) {
        if (now > next_refresh) keeper.refresh(router);  // not at start: apply() just ran
        next_refresh = now + std::chrono::seconds(*every);
      }
    }
    timespec wait{1, 0};
    int sig = sigtimedwait(&set, nullptr, &wait);
    if (sig < 0) continue;  // a second passed (EAGAIN) or a signal interrupted the wait
    if (sig != SIGHUP) return sig;
    reread_secrets();
    if (config_path.empty()) {
      spdlog::get("main")->warn("sighup_ignored reason=\"no configuration file to reload\"");
    } else {
      if (watch) watch->rebase();  // what SIGHUP reads, the watch has seen
      keeper.reload(config_path, router);
    }
  }
}

}  // namespace

config::result<secrets> read_secrets(const config::gateway& cfg) {
  secrets s;
  config::result<std::unique_ptr<auth::authenticator>> created = auth::authenticator::create(cfg.security);
  if (!created.ok()) return created.error();
  s.authenticator = std::move(created).value();
  config::result<auth::backend_credentials> tokens = auth::resolve_backend_tokens(cfg.security);
  if (!tokens.ok()) return tokens.error();
  s.backend_tokens = std::move(tokens).value();
  s.admin_tokens = std::make_unique<auth::admin_tokens>();
  if (auto err = auth::load_admin_tokens(cfg.admin, *s.admin_tokens)) return *err;
  return s;
}

int run_gateway(const config::gateway& cfg, const std::string& config_path, const std::string& port_file) {
  auto log = spdlog::get("main");
  raise_open_file_limit(*log);
  // Before any worker thread starts: they inherit it.
  if (auto slice = core::request_sched_slice(std::chrono::microseconds(cfg.limits.sched_slice_us)); slice.applied)
    log->info("sched_slice us={}", cfg.limits.sched_slice_us);
  else if (cfg.limits.sched_slice_us > 0)
    log->warn("sched_slice_not_applied us={} reason=\"{}\"", cfg.limits.sched_slice_us, slice.reason);
  // Debian's abseil is built without NDEBUG: its mutex deadlock detection
  // costs a few percent of every gRPC call scg makes itself (probes,
  // searches, interrupts; docs/performance.md, "Levers applied").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", 2);
  // Work sharing sleeps on a condition variable when idle; CAF's default
  // work stealing polls (about 0.05 cores of an idle replica).
  caf_cfg.set("scheduler.policy", caf::atom("sharing"));
  if (cfg.cluster) cluster::configure(caf_cfg, *cfg.cluster);
  caf::actor_system sys{caf_cfg};
  sys.await_actors_before_shutdown(false);
  // The cluster actor stays published on the middleman, which would keep
  // the actor system alive: stopped on every way out of here.
  struct cluster_stopper {
    caf::actor_system& sys;
    ~cluster_stopper() { cluster::stop(sys); }
  } stop_cluster{sys};

  actors::backend_list backends;
  backend_keeper keeper{cfg, backends};
  keeper.apply(cfg.backends, nullptr);  // the router starts the actors of these
  auto table = std::make_shared<actors::session_table>(actors::backend_list::capacity);
  auto read = read_secrets(cfg);
  if (!read.ok()) {
    log->error("startup_failed reason=\"{}\"", read.error().to_string());
    return 1;
  }
  secrets& found = read.value();
  auto& authenticator = found.authenticator;
  auth::admin_tokens& admin_tokens = *found.admin_tokens;
  // Tokens are read again on SIGHUP and every reload.watch_secs (a Secret
  // mounted as a volume is updated in place); a file gone bad keeps the old ones.
  auto reread_admin_tokens = [&cfg, &admin_tokens, &log] {
    const auto before = admin_tokens.fingerprint();
    if (auto err = auth::load_admin_tokens(cfg.admin, admin_tokens)) {
      admin::global_admin_counters().token_reload_failures.fetch_add(1, std::memory_order_relaxed);
      log->error("admin_tokens_reload_failed reason=\"{}\" action=\"kept the tokens in use\"", err->to_string());
      return;
    }
    if (admin_tokens.fingerprint() == before) return;
    admin::global_admin_counters().token_reloads.fetch_add(1, std::memory_order_relaxed);
    log->info("admin_tokens_reloaded tokens=\"{}\"", admin_tokens.fingerprint());
  };
  auth::rate_limiter limiter{cfg.security.rate_limits};

  // Declared before the forward context: spans are submitted until the last call ends.
  std::unique_ptr<net::span_exporter> tracer;
  if (cfg.tracing) {
    tracer = std::make_unique<net::span_exporter>(*cfg.tracing);
    log->info("tracing_on endpoint={} service_name={}", cfg.tracing->otlp_endpoint, cfg.tracing->service_name);
  }

  net::forward_context fx;
  fx.tracer = tracer.get();
  fx.auth = authenticator.get();
  fx.limiter = &limiter;
  fx.backend_tokens = std::move(found.backend_tokens);
  if (auto wrong = net::configure(fx, cfg); !wrong.empty()) {
    log->error("startup_failed reason=\"{}\"", wrong);
    return 1;
  }
  // Cluster-wide limits: each replica enforces its share, 1 / live members.
  auto on_members = [&fx, &limiter](std::size_t live) {
    const double share = 1.0 / static_cast<double>(std::max<std::size_t>(live, 1));
    fx.share = share;
    limiter.set_share(share);
  };
  // The replicated table, shared by the cluster actor (its writer) and the router.
  auto replicated = cfg.cluster ? std::make_shared<cluster::replicated_table>() : nullptr;
  actors::replicated_view replicated_reads;
  if (replicated) {
    replicated_reads.backend = [replicated](const std::string& key) { return replicated->live_backend(key); };
    replicated_reads.released = [replicated](const std::string& key) { return replicated->released(key); };
  }
  actors::router router{sys, cfg, table, backends, fx.backend_tokens.own_calls(), on_members, replicated_reads};
  fx.backends = backends;
  fx.table = table;
  fx.router = &router;

  admin::admin_view view;
  view.backends = backends;
  view.table = table;
  view.journal = fx.journal;
  view.replays = [&fx](std::string_view tenant) {
    return fx.lost_action_for(tenant) == config::lost_action::replay;
  };
  view.policy = actors::make_policy(cfg.placement);
  view.set_draining = [&router](const std::string& name, bool on) { router.set_draining(name, on); };
  view.executions = &fx.executions;
  view.drain_idle_ms = std::int64_t{cfg.drain.idle_secs} * 1000;
  view.usage = &core::global_usage();
  for (const auto& [tenant, names] : cfg.security.tenants.pools) view.pools[tenant] = names;
  int cluster_port = 0;
  if (cfg.cluster) {
    view.node_name = cfg.cluster->node_name;
    view.cluster = std::make_shared<cluster::cluster_view>();
    view.synced = false;
    cluster_port = cluster::start(sys, *cfg.cluster, cfg.affinity, replicated, table, backends, router.actor(),
                                  view.cluster, [&view] { view.synced = true; });
    if (cluster_port == 0) return 1;
  }

  try {
    net::front_door door{cfg, fx};
    std::unique_ptr<admin::admin_http> admin;
    if (cfg.admin_addr) {
      admin = std::make_unique<admin::admin_http>(*cfg.admin_addr, view, cfg.admin, admin_tokens);
      if (!admin_tokens.configured(auth::admin_role::read) && !cfg.admin.allow_unauthenticated)
        log->warn("admin_locked reason=\"no admin token file is configured: listings and changes on the admin API "
                  "are refused\" fix=\"set admin.token_file (and admin.read_token_file), or "
                  "admin.allow_unauthenticated: true on a trusted network\"");
    }
    view.ready = true;
    log->info("listening grpc_port={} admin_port={} probe_port={} backends={}", door.port(),
              admin ? admin->port() : 0, admin ? admin->probe_port() : 0, backends.size());
    if (!port_file.empty())
      write_port_file(port_file, door.port(), admin ? admin->port() : 0, admin ? admin->probe_port() : 0,
                      cluster_port);

    // Kubernetes discovery reports from its own thread; the loop below applies it.
    std::unique_ptr<discovery::k8s_watcher> watcher;
    if (cfg.backend_discovery)
      watcher = std::make_unique<discovery::k8s_watcher>(
          *cfg.backend_discovery, [&keeper](std::vector<actors::backend_spec> specs) {
            keeper.post_discovered(std::move(specs));
          });
    std::unique_ptr<config::file_watch> watch;
    if (!config_path.empty() && cfg.reload.watch_secs > 0) {
      watch = std::make_unique<config::file_watch>(config_path);
      log->info("config_watch file={} every_secs={}", config_path, cfg.reload.watch_secs);
    }
    // Reports go to peers: a single replica counts only its own.
    std::unique_ptr<drain_reporter> reporter;
    if (cfg.cluster)
      reporter = std::make_unique<drain_reporter>(backends, table, fx.executions, view.drain_idle_ms, router);
    // replay: journals of sessions the table no longer binds (released
    // elsewhere, or expired after affinity.session_ttl_secs) go, once a
    // minute (or every half ttl, when shorter).
    const auto sweep_every = std::chrono::seconds(std::clamp(cfg.affinity.session_ttl_secs / 2, 1, 60));
    auto next_sweep = std::chrono::steady_clock::now() + sweep_every;
    auto sweep_journals = [&] {
      if (!fx.journal || std::chrono::steady_clock::now() < next_sweep) return;
      next_sweep = std::chrono::steady_clock::now() + sweep_every;
      const auto gone = fx.journal->sweep([&](const std::string& key) { return table->session_backend(key).has_value(); });
      if (gone > 0) log->info("journals_swept sessions={}", gone);
    };
    int sig = wait_for_stop_signal(keeper, config_path, router, *authenticator, watch.get(),
                                   cfg.reload.watch_secs, reporter.get(), reread_admin_tokens, sweep_journals);
    watcher.reset();
    view.ready = false;
    router.stop_new_sessions();
    log->info("draining signal={} deadline_secs={}", sig, cfg.shutdown.deadline_secs);
    door.shutdown(std::chrono::system_clock::now() +
                  std::chrono::seconds(cfg.shutdown.deadline_secs));
    if (cfg.cluster) {
      // Writes of the last moments (a decision for a peer, a release) would
      // otherwise die with this process, known to one replica or none.
      const auto left = router.leave_cluster(std::chrono::seconds(2));
      if (!left.error.empty() || left.acknowledged < left.peers)
        log->warn("left_cluster peers={} acknowledged={} reason=\"{}\"", left.peers, left.acknowledged,
                  left.error.empty() ? "a peer did not take the last writes in time: the ones it lacks are lost"
                                     : left.error);
      else
        log->info("left_cluster peers={} acknowledged={}", left.peers, left.acknowledged);
    }
    // The router answers what it still holds before the workers those
    // answers go to are destroyed (with the door, at the end of this scope).
    router.stop();
    log->info("stopped");
  } catch (const std::exception& e) {
    log->error("startup_failed reason=\"{}\"", e.what());
    return 1;
  }
  return 0;
}

}  // namespace scg::app
