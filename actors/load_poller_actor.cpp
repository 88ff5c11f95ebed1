// The load poller: one per backend that has a ui_url. Every
// placement.poll_interval_ms it reads the Spark UI REST API (applications,
// executors, active stages), turns it into utilization and folds it into the
// backend's EWMA, which placement reads. A failed poll (timeout, HTTP error,
// malformed JSON) is a missing sample: counted, logged once per change of
// state, never fatal.
#include "actors/protocol.hpp"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "actors/load.hpp"
#include "core/replicated_key.hpp"

namespace scg::actors {

struct load_poller_state {
  std::shared_ptr<backend_state> backend;
  std::unique_ptr<ewma> average;
  std::chrono::milliseconds interval{2000};
  std::string app_id;
  router_actor router;
  bool failing = false;  // the last poll failed (log only on changes)
  static inline const char* name = "load_poller";
};

namespace {

constexpr auto http_timeout_secs = 2;

/// GET `path` on the Spark UI; the body, or an error naming what failed.
std::pair<std::string, std::string> get(httplib::Client& http, const std::string& path) {
  auto res = http.Get(path.c_str());
  if (!res) return {{}, "GET " + path + ": " + httplib::to_string(res.error())};
  if (res->status != 200) return {{}, "GET " + path + ": HTTP " + std::to_string(res->status)};
  return {res->body, {}};
}

/// One poll: the load, or an error.
load_result poll_once(load_poller_state& st) {
  httplib::Client http(st.backend->ui_url);
  http.set_connection_timeout(http_timeout_secs);
  http.set_read_timeout(http_timeout_secs);
  if (st.app_id.empty()) {
    auto [body, err] = get(http, "/api/v1/applications");
    if (!err.empty()) return {std::nullopt, err};
    st.app_id = app_id_from_applications(body, err);
    if (st.app_id.empty()) return {std::nullopt, err};
  }
  const std::string base = "/api/v1/applications/" + st.app_id;
  auto [executors, e1] = get(http, base + "/executors");
  if (!e1.empty()) {
    st.app_id.clear();  // the server may have restarted with a new application
    return {std::nullopt, e1};
  }
  auto [stages, e2] = get(http, base + "/stages?status=active");
  if (!e2.empty()) return {std::nullopt, e2};
  return parse_spark_load(executors, stages);
}

using self_ptr = load_poller_actor::stateful_pointer<load_poller_state>;

/// Polls once and records the result.
void poll(self_ptr self) {
  auto& st = self->state;
  auto log = spdlog::get("backend");
  st.backend->polls_total.fetch_add(1, std::memory_order_relaxed);
  auto r = poll_once(st);
  if (r.load) {
    st.average->add(utilization(*r.load));
    const double u = *st.average->value();
    st.backend->utilization.store(u);
    self->send(st.router, load_atom::value, st.backend->name, u);
    if (st.failing) log->info("poll_recovered backend={}", st.backend->name);
    if (st.failing) st.backend->set_poll_error({});
    st.failing = false;
  } else {
    st.backend->poll_errors_total.fetch_add(1, std::memory_order_relaxed);
    st.backend->set_poll_error(st.backend->ui_url + ": " + r.error);
    if (!st.failing)
      log->warn("poll_failed backend={} ui_url={} reason=\"{}\"", st.backend->name, st.backend->ui_url,
                r.error);
    st.failing = true;
  }
}

load_poller_actor::behavior_type load_poller_behavior(self_ptr self, std::shared_ptr<backend_state> backend,
                                                      double alpha, std::chrono::milliseconds interval,
                                                      router_actor router) {
  auto& st = self->state;
  st.backend = std::move(backend);
  st.average = std::make_unique<ewma>(alpha);
  st.interval = interval;
  st.router = std::move(router);
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        // Only the backend's owner polls; the others get its figure replicated.
        ask_owner(self, self->state.router, core::make_key(core::key_kind::load, self->state.backend->name), [=](bool mine) {
          if (mine && !self->state.backend->removed.load()) poll(self);
          self->delayed_send(self, self->state.interval, tick_atom::value);
        });
      },
  };
}

}  // namespace

load_poller_actor spawn_load_poller(caf::actor_system& sys, std::shared_ptr<backend_state> backend, double alpha,
                                    std::chrono::milliseconds interval, router_actor router) {
  // Detached: the HTTP client blocks for up to its timeouts.
  return sys.spawn<caf::detached>(load_poller_behavior, std::move(backend), alpha, interval,
                                  std::move(router));
}

}  // namespace scg::actors
