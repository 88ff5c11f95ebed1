#include "admin/admin_http.hpp"

#include "net/session_journal.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <variant>

#include "actors/router_stats.hpp"
#include "auth/admin_auth.hpp"
#include "cluster/cluster_stats.hpp"
#include "cluster/protocol_version.hpp"
#include "core/address.hpp"
#include "core/audit.hpp"
#include "core/clock.hpp"
#include "core/events.hpp"
#include "core/metrics.hpp"
#include "core/prometheus.hpp"
#include "core/throttle.hpp"
#include "net/net_stats.hpp"
#include "admin/admin_access.hpp"
#include "admin/admin_server.hpp"
#include "admin/drain_report.hpp"
#include "admin/status_page.hpp"
#include "admin/usage_http.hpp"

namespace scg::admin {

namespace {

nlohmann::json utilization_of(const actors::backend_state& b) {
  auto u = actors::polled_utilization(b);
  return u ? nlohmann::json(*u) : nlohmann::json(nullptr);
}

/// The placement score of backend `i` now (sessions on this replica's view).
double score_of(const admin_view& view, std::size_t i, const std::vector<std::size_t>& bound) {
  actors::candidate c{true, i < bound.size() ? bound[i] : 0,
                      actors::polled_utilization(*view.backends[i])};
  return actors::score(view.policy, c);
}

/// Cursors are the last key of a page in hex: opaque to clients and safe in a
/// URL whatever bytes the session or operation ids hold.
std::string to_cursor(const std::string& key) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(key.size() * 2);
  for (unsigned char c : key) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::optional<std::string> from_cursor(const std::string& cursor) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (cursor.size() % 2) return std::nullopt;
  std::string out;
  for (std::size_t i = 0; i < cursor.size(); i += 2) {
    int hi = nibble(cursor[i]), lo = nibble(cursor[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

/// The query of a listing request, or an error message for a 400.
std::variant<list_query, std::string> parse_list_query(const httplib::Request& req) {
  list_query q;
  if (req.has_param("limit")) {
    const auto& v = req.get_param_value("limit");
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
      return std::string("limit: expected a positive integer");
    q.limit = std::clamp<std::size_t>(std::stoul(v), 1, list_query::max_limit);
  }
  if (req.has_param("after")) {
    auto after = from_cursor(req.get_param_value("after"));
    if (!after) return std::string("after: not a cursor from a previous page's next");
    q.after = std::move(*after);
  }
  q.tenant = req.get_param_value("tenant");
  q.user = req.get_param_value("user");
  q.session = req.get_param_value("session");
  q.backend = req.get_param_value("backend");
  // One session named whole by tenant, user and session, or several by
  // `key=TENANT/USER/SESSION` (repeated): looked up, not scanned for.
  if (!q.tenant.empty() && !q.user.empty() && !q.session.empty())
    q.named.push_back({q.tenant, q.user, q.session});
  const auto n = req.get_param_value_count("key");
  if (n > list_query::max_limit)
    return "key: at most " + std::to_string(list_query::max_limit) + " sessions named at once";
  for (std::size_t i = 0; i < n; ++i) {
    const auto& v = req.get_param_value("key", i);
    const auto first = v.find('/'), last = v.rfind('/');
    if (first == std::string::npos || first == last || first == 0 || last + 1 == v.size() || last == first + 1)
      return "key: expected TENANT/USER/SESSION, got \"" + v.substr(0, 200) + "\"";
    q.named.push_back({v.substr(0, first), v.substr(first + 1, last - first - 1), v.substr(last + 1)});
  }
  return q;
}

const std::string& backend_name(const admin_view& view, actors::backend_index i) {
  static const std::string none;
  return i < view.backends.size() ? view.backends[i]->name : none;
}

/// Whether backend `i` passes the query's backend filter.
bool backend_matches(const admin_view& view, const list_query& q, actors::backend_index i) {
  return q.backend.empty() || backend_name(view, i) == q.backend;
}

/// Whether the session `key` passes the query's tenant, user and session filters.
bool key_matches(const list_query& q, std::string_view key) {
  if (q.tenant.empty() && q.user.empty() && q.session.empty() && q.named.empty()) return true;
  auto k = actors::session_key::parse(key);
  if (!k) return false;
  const bool named = q.named.empty() || std::any_of(q.named.begin(), q.named.end(), [&](const actors::session_key& n) {
                       return n.tenant == k->tenant && n.user_id == k->user_id && n.session_id == k->session_id;
                     });
  return named && (q.tenant.empty() || k->tenant == q.tenant) && (q.user.empty() || k->user_id == q.user) &&
         (q.session.empty() || k->session_id == q.session);
}

/// Milliseconds since a last use here; null when never used here (learned from a peer).
nlohmann::json ms_ago(core::clock_ms now, core::clock_ms last_seen) {
  if (last_seen <= 0) return nullptr;
  return std::max<core::clock_ms>(0, now - last_seen);
}

/// The identity fields of a session key, as listings show them.
void add_key_fields(nlohmann::json& item, const std::string& key) {
  auto k = actors::session_key::parse(key).value_or(actors::session_key{});
  item["session_id"] = k.session_id;
  item["user_id"] = k.user_id;
  item["tenant"] = k.tenant;
}

/// Session and operation ids are client bytes, not always UTF-8: replace
/// what JSON cannot carry instead of throwing.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// A JSON answer with `status`.
void reply_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply_json(res, status, dump({{"error", message}}));
}

/// Serves a file of admin/ui/. The page only fetches from its own origin, so a
/// strict policy costs nothing and keeps injected markup inert.
void serve_ui(httplib::Response& res, const std::string& name) {
  const auto* f = find_ui_file(name);
  if (!f) {
    res.status = 404;
    res.set_content("not found\n", "text/plain");
    return;
  }
  res.set_header("Content-Security-Policy", "default-src 'self'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  res.set_content(std::string(f->body), std::string(ui_content_type(name)));
}

}  // namespace

std::string sessions_json(const admin_view& view, const list_query& q) {
  std::vector<actors::session_table::session_row> rows;
  if (!q.named.empty()) {
    // Sessions named whole: looked up, not found by a scan of the table.
    for (const auto& k : q.named) {
      const auto key = k.str();
      if (!key_matches(q, key)) continue;  // the other filters still apply
      auto row = view.table->session_row_of(key);
      if (row && row->key > q.after && backend_matches(view, q, row->backend)) rows.push_back(std::move(*row));
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    rows.erase(std::unique(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.key == b.key; }),
               rows.end());
  } else {
    rows = view.table->list_sessions(q.after, q.limit + 1, [&](std::string_view key, actors::backend_index b) {
      return backend_matches(view, q, b) && key_matches(q, key);
    });
  }
  // One more row than asked tells whether another page follows.
  nlohmann::json next = nullptr;
  if (rows.size() > q.limit) {
    rows.pop_back();
    next = to_cursor(rows.back().key);
  }
  std::unordered_map<std::string, std::size_t> ops;
  for (const auto& r : rows) ops.emplace(r.key, 0);
  view.table->count_ops(ops);
  const auto now = core::now_ms();
  auto list = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json item{{"backend", backend_name(view, r.backend)},
                        {"last_seen_ms_ago", ms_ago(now, r.last_seen)},
                        {"operations", ops[r.key]}};
    add_key_fields(item, r.key);
    if (view.journal && (!view.replays || view.replays(item["tenant"].get<std::string>()))) {  // replay
      const auto why = view.journal->why_not(r.key);
      item["replayable"] = why == net::unreplayable::none;
      item["unreplayable_reason"] = why == net::unreplayable::none ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(net::unreplayable_name(why));
    }
    list.push_back(std::move(item));
  }
  return dump({{"sessions", list}, {"next", next}, {"total", view.table->session_count()}});
}

std::string operations_json(const admin_view& view, const list_query& q) {
  auto rows = view.table->list_ops(
      q.after, q.limit + 1, [&](std::string_view, const actors::session_table::op_entry& op) {
        return backend_matches(view, q, op.backend) && key_matches(q, op.session);
      });
  nlohmann::json next = nullptr;
  if (rows.size() > q.limit) {
    rows.pop_back();
    next = to_cursor(rows.back().key);
  }
  const auto now = core::now_ms();
  auto list = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json item{{"operation_id", r.key},
                        {"backend", backend_name(view, r.op.backend)},
                        {"last_seen_ms_ago", ms_ago(now, r.last_seen)}};
    if (r.op.started_wall_ms > 0) item["started_ms"] = r.op.started_wall_ms;
    add_key_fields(item, r.op.session);
    list.push_back(std::move(item));
  }
  return dump({{"operations", list}, {"next", next}, {"total", view.table->op_count()}});
}

std::string events_json(std::uint64_t after) {
  auto list = nlohmann::json::array();
  for (const auto& e : core::global_events().since(after))
    list.push_back({{"seq", e.seq}, {"time_ms", e.time_ms}, {"kind", e.kind}, {"text", e.text}});
  return dump({{"events", list}});
}

namespace {

/// The status a drain reaches on this replica (serving without a ledger).
actors::drain_status drain_of(const admin_view& view, std::size_t i) {
  static const execution_ledger none;
  return drain_status_of(view.backends, *view.table, view.executions ? *view.executions : none,
                         view.cluster.get(), static_cast<actors::backend_index>(i), view.drain_idle_ms);
}

nlohmann::json backend_item(const admin_view& view, std::size_t i, const std::vector<std::size_t>& bound) {
  const auto& b = *view.backends[i];
  return {{"name", b.name},
          {"address", b.address},
          {"ui_url", b.ui_url},
          {"healthy", b.reachable.load() && b.healthy.load()},
          {"draining", b.draining.load()},
          {"removed", b.removed.load()},
          {"score", score_of(view, i, bound)},
          {"utilization", utilization_of(b)},
          {"load_error", b.poll_error()},
          {"sessions", i < bound.size() ? bound[i] : 0},
          {"in_flight", b.in_flight.load()},
          {"drain", drain_json(view, i)}};
}

}  // namespace

nlohmann::json drain_json(const admin_view& view, std::size_t i) {
  const auto s = drain_of(view, i);
  nlohmann::json last = nullptr;
  if (s.total.last_activity_wall_ms > 0)
    last = std::max<std::int64_t>(0, core::wall_now_ms() - s.total.last_activity_wall_ms) / 1000;
  return {{"state", actors::to_string(s.state)},
          {"live_operations", s.total.live_operations},
          {"active_sessions", s.total.active_sessions},
          {"calls_in_flight", s.total.calls_in_flight},
          {"last_activity_secs", last},
          {"idle_secs", view.drain_idle_ms / 1000},
          {"waiting_for", s.waiting_for},
          {"holders", actors::holders(s)}};
}

std::string backend_json(const admin_view& view, std::size_t i) {
  auto bound = view.table->sessions_per_backend(view.backends.size());
  return backend_item(view, i, bound).dump();
}

std::string backends_json(const admin_view& view) {
  auto bound = view.table->sessions_per_backend(view.backends.size());
  auto list = nlohmann::json::array();
  for (std::size_t i = 0; i < view.backends.size(); ++i) list.push_back(backend_item(view, i, bound));
  return nlohmann::json{{"backends", list}}.dump();
}

std::string cluster_json(const admin_view& view) {
  auto members = nlohmann::json::array();
  if (view.cluster) {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    for (const auto& m : view.cluster->members())
      members.push_back({{"name", m.name},
                         {"address", m.address},
                         {"status", m.status},
                         {"last_seen_ms_ago", m.last_seen_ms ? now - m.last_seen_ms : -1},
                         {"replication_lag_ms", m.lag_ms},
                         {"protocol", m.protocol},
                         {"owner", m.owner},
                         // null: a protocol-1 peer (v0.1.0) announces no version
                         {"scg_version", m.scg_version.empty() ? nlohmann::json() : nlohmann::json(m.scg_version)}});
  } else {
    const auto self = cluster::this_build();
    members.push_back({{"name", view.node_name}, {"address", ""}, {"status", "self"},
                       {"last_seen_ms_ago", 0}, {"replication_lag_ms", 0}, {"protocol", self.protocol},
                       {"owner", true}, {"scg_version", self.scg_version}});
  }
  return nlohmann::json{{"node", view.node_name},
                        {"synced", view.synced.load()},
                        {"conflicts", view.cluster ? view.cluster->conflicts() : 0},
                        {"members", members}}
      .dump();
}

namespace {

/// The drain gauges of the backends `shown`: counted for drained backends
/// only (a pass over the session table each), 0 for the others.
void drain_metrics(const admin_view& view, const std::vector<std::size_t>& shown, core::prometheus_writer& w) {
  std::vector<actors::drain_status> st;
  for (auto i : shown) st.push_back(drain_of(view, i));
  auto series = [&](const char* name, const char* help, auto value) {
    w.family(name, help, "gauge");
    for (std::size_t k = 0; k < shown.size(); ++k) w.sample({{"backend", view.backends[shown[k]]->name}}, value(st[k]));
  };
  series("backend_drain_idle", "1 when the backend is drained and nothing holds it on any replica: safe to stop",
         [](const actors::drain_status& s) { return s.state == actors::drain_state::idle ? 1 : 0; });
  series("backend_live_operations", "Executions running on the drained backend, all replicas (0 when not drained)",
         [](const actors::drain_status& s) { return s.total.live_operations; });
  series("backend_active_sessions",
         "Sessions of the drained backend used within drain.idle_secs, all replicas (0 when not drained)",
         [](const actors::drain_status& s) { return s.total.active_sessions; });
}

/// The scg_admin_* series: the admin plane's own listeners, refusals and load.
void admin_metrics(const admin_view& view, core::prometheus_writer& w) {
  const auto& c = global_admin_counters();
  struct per_listener {
    const char* name;
    const char* help;
    const char* type;
    std::int64_t (*value)(const listener_stats&);
  };
  const per_listener series[] = {
      {"connections", "Connections open on the listener", "gauge",
       [](const listener_stats& s) { return static_cast<std::int64_t>(s.open.load()); }},
      {"connections_total", "Connections accepted and served", "counter",
       [](const listener_stats& s) { return static_cast<std::int64_t>(s.accepted.load()); }},
      {"connections_refused_total", "Connections closed at accept: admin.max_connections were open", "counter",
       [](const listener_stats& s) { return static_cast<std::int64_t>(s.refused.load()); }},
      {"idle_closed_total", "Connections closed after admin.idle_timeout_ms without a request", "counter",
       [](const listener_stats& s) { return static_cast<std::int64_t>(s.idle_closed.load()); }},
      {"request_timeouts_total", "Connections closed: a request not read whole within admin.request_timeout_ms",
       "counter", [](const listener_stats& s) { return static_cast<std::int64_t>(s.request_timeouts.load()); }},
  };
  for (const auto& x : series) {
    w.family(std::string("admin_") + x.name, x.help, x.type);
    w.sample({{"listener", "admin"}}, x.value(c.admin));
    w.sample({{"listener", "probe"}}, x.value(c.probe));
  }
  w.family("admin_heavy_requests", "Listings and metrics being served now (bounded by admin.max_heavy_requests)", "gauge")
      .sample(view.heavy ? view.heavy->in_use() : 0);
  w.family("admin_requests_shed_total", "Listings and metrics answered 503 with Retry-After at admin.max_heavy_requests",
           "counter")
      .sample(c.shed.load());
  w.family("admin_denied_total", "Admin requests refused 401 or 403, by reason", "counter");
  for (std::size_t r = 1; r < deny_reason_count; ++r)
    w.sample({{"reason", to_string(static_cast<deny_reason>(r))}}, c.denied[r].load());
  w.family("admin_token_reloads_total", "Admin token files read again with new contents (SIGHUP, reload.watch_secs)",
           "counter")
      .sample(c.token_reloads.load());
  w.family("admin_token_reload_failures_total",
           "Admin token files that could not be read again; the tokens in use were kept", "counter")
      .sample(c.token_reload_failures.load());
}

/// GET /api/v1/backends/{name}: one backend's entry, with its drain status.
void add_backend_routes(httplib::Server& srv, admin_view& view) {
  srv.Get(R"(/api/v1/backends/([^/]+))", [&view](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    auto i = actors::find_backend(view.backends, name);
    if (!i) return reply_error(res, 404, "no backend named " + name);
    reply_json(res, 200, backend_json(view, *i));
  });
}

}  // namespace

std::string metrics_text(const admin_view& view) {
  std::string out;
  core::global_metrics().render(out);
  core::prometheus_writer w(out);
  // Each component's own block (its counters beside its code).
  net::global_net_stats().render(w);
  actors::global_router_stats().render(w);
  cluster::global_cluster_stats().render(w);
  w.family("sessions_active", "Sessions bound on this replica", "gauge").sample(view.table->session_count());
  w.family("operations_active", "Operations in the operation index", "gauge").sample(view.table->op_count());
  if (view.cluster) {
    // One series per peer: bounded by the cluster's size, never by traffic.
    const auto members = view.cluster->members();
    w.family("cluster_member_up", "1 while the peer replica is connected, 0 when it is down", "gauge");
    for (const auto& m : members)
      if (m.status != "self") w.sample({{"member", m.name}}, m.status == "up" ? 1 : 0);
    w.family("cluster_replication_lag_seconds",
             "Age of the oldest entry in the last batch from the peer when it arrived here", "gauge");
    for (const auto& m : members)
      if (m.status != "self") w.sample({{"member", m.name}}, static_cast<double>(m.lag_ms) / 1000.0);
  }

  auto bound = view.table->sessions_per_backend(view.backends.size());
  struct per_backend {
    const char* name;
    const char* help;
    const char* type;
    std::function<std::string(std::size_t)> value;
  };
  const per_backend series[] = {
      {"backend_sessions", "Sessions bound to the backend", "gauge",
       [&](std::size_t i) { return std::to_string(i < bound.size() ? bound[i] : 0); }},
      {"backend_reachable", "1 when the backend's channel is not failing", "gauge",
       [&](std::size_t i) { return std::string(view.backends[i]->reachable ? "1" : "0"); }},
      {"backend_healthy", "1 when the backend answers its health probes", "gauge",
       [&](std::size_t i) { return std::string(view.backends[i]->healthy ? "1" : "0"); }},
      {"backend_draining", "1 while the backend is drained (no new sessions)", "gauge",
       [&](std::size_t i) { return std::string(view.backends[i]->draining ? "1" : "0"); }},
      {"backend_removed", "1 when the backend left the configured set (reload or DNS)", "gauge",
       [&](std::size_t i) { return std::string(view.backends[i]->removed ? "1" : "0"); }},
      {"backend_in_flight", "Calls being forwarded to the backend", "gauge",
       [&](std::size_t i) { return std::to_string(view.backends[i]->in_flight.load()); }},
      {"backend_calls_total", "Calls started to the backend", "counter",
       [&](std::size_t i) { return std::to_string(view.backends[i]->calls_total.load()); }},
      {"backend_unavailable_total", "Calls that could not reach the backend", "counter",
       [&](std::size_t i) { return std::to_string(view.backends[i]->unavailable_total.load()); }},
      {"backend_utilization", "EWMA of (active + pending tasks) / task slots; -1 before a poll",
       "gauge", [&](std::size_t i) { return std::to_string(view.backends[i]->utilization.load()); }},
      {"backend_score", "Placement score (lower takes new sessions first)", "gauge",
       [&](std::size_t i) { return std::to_string(score_of(view, i, bound)); }},
      {"backend_polls_total", "Spark UI polls made by this replica (the backend's owner)", "counter",
       [&](std::size_t i) { return std::to_string(view.backends[i]->polls_total.load()); }},
      {"backend_poll_errors_total", "Failed Spark UI polls", "counter",
       [&](std::size_t i) { return std::to_string(view.backends[i]->poll_errors_total.load()); }},
  };
  // One series per name: an entry superseded by a newer one of the same
  // name (its address changed on reload) is left out.
  std::vector<std::size_t> shown;
  for (std::size_t i = 0; i < view.backends.size(); ++i)
    if (actors::find_backend(view.backends, view.backends[i]->name) == i) shown.push_back(i);
  for (const auto& s : series) {
    w.family(s.name, s.help, s.type);
    for (auto i : shown) w.sample({{"backend", view.backends[i]->name}}, s.value(i));
  }
  drain_metrics(view, shown, w);
  append_usage_metrics(w, view);
  admin_metrics(view, w);
  return out;
}

namespace {

void add_probe_routes(httplib::Server& srv, const admin_view& view) {
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  srv.Get("/readyz", [&view](const httplib::Request&, httplib::Response& res) {
    bool ready = view.ready.load() && view.synced.load();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
  });
}

/// Who made a request, as the audit trail names them.
std::string who(const auth::admin_caller& c) { return c.role == auth::admin_role::none ? "unauthenticated" : c.id; }

/// Decides every request before routing (admin/admin_access.hpp): a refusal is
/// answered here with a JSON error naming the problem, counted by reason and
/// logged once; listings and metrics take a slot of admin.max_heavy_requests.
httplib::Server::HandlerWithResponse gatekeeper(const config::admin_plane& plane, const auth::admin_tokens& tokens,
                                                request_gate& heavy) {
  const access_policy policy{plane.allow_unauthenticated, plane.open_metrics};
  return [policy, &tokens, &heavy](const httplib::Request& req, httplib::Response& res) {
    using handled = httplib::Server::HandlerResponse;
    const auto origin = req.get_header_value("Origin");
    const auto host = req.get_header_value("Host");
    const auto authorization = req.get_header_value("Authorization");
    const auto d = decide(policy, tokens, {req.method, req.path, origin, host, authorization});
    if (!d.allowed()) {
      global_admin_counters().denied[static_cast<std::size_t>(d.denied)].fetch_add(1, std::memory_order_relaxed);
      const auto reason = to_string(d.denied);
      // One line (and one audit event) per reason per 10 s: a neighbour hammering
      // the port must not flood the logs; the counter above counts every refusal.
      // Refused changes have throttles of their own, so a flood of refused reads
      // never hides a refused drain from the audit trail.
      static std::array<core::log_throttle, 2 * deny_reason_count> throttles;
      const bool change = classify(req.method, req.path) == admin_route::change;
      const auto slot = static_cast<std::size_t>(d.denied) + (change ? deny_reason_count : 0);
      if (const auto held = throttles[slot].pass(); held >= 0) {
        spdlog::get("admin")->warn(
            "admin_denied reason={} status={} method={} path=\"{}\" peer={} caller={} origin=\"{}\" held_back={}",
            reason, d.status, req.method, req.path.substr(0, 200), req.remote_addr, who(d.caller),
            origin.substr(0, 200), held);
        if (change)
          core::audit("admin.denied", {{"method", req.method}, {"path", req.path.substr(0, 200)}, {"reason", reason},
                                       {"by", who(d.caller)}, {"peer", req.remote_addr},
                                       {"held_back", std::to_string(held)}});
      }
      if (d.status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"scg-admin\"");
      reply_json(res, d.status, dump({{"error", d.message}, {"reason", reason}}));
      return handled::Handled;
    }
    if (is_heavy(classify(req.method, req.path))) {
      if (!heavy.try_enter()) {
        global_admin_counters().shed.fetch_add(1, std::memory_order_relaxed);
        spdlog::get("admin")->debug("admin_shed path=\"{}\" peer={}", req.path.substr(0, 200), req.remote_addr);
        res.set_header("Retry-After", "1");
        reply_error(res, 503, "too many listings and metrics requests at once (admin.max_heavy_requests): retry");
        return handled::Handled;
      }
      hold_for_request(heavy);
    }
    return handled::Unhandled;
  };
}

/// Starts `srv` on `addr` in `thread`; the port.
int start(bounded_server& srv, const std::string& addr, const char* key, std::thread& thread) {
  const auto parts = core::parse_host_port(addr, true);  // the config validated the form
  if (!parts) throw std::runtime_error(std::string(key) + " " + addr + " is not host:port");
  const int port = srv.bind(parts->host, parts->port);
  if (port <= 0) throw std::runtime_error(std::string("cannot listen for admin HTTP on ") + key + " " + addr);
  thread = std::thread([&srv] { srv.listen_after_bind(); });
  return port;
}

}  // namespace

admin_http::admin_http(const std::string& addr, admin_view& view, const config::admin_plane& plane,
                       const auth::admin_tokens& tokens)
    : heavy_(std::make_unique<request_gate>(plane.max_heavy_requests)) {
  const listener_limits limits{plane.max_connections, plane.idle_timeout_ms, plane.request_timeout_ms};
  server_ = std::make_unique<bounded_server>(limits, global_admin_counters().admin);
  view.heavy = heavy_.get();
  auto& srv = *server_;
  srv.set_pre_routing_handler(gatekeeper(plane, tokens, *heavy_));
  add_probe_routes(srv, view);
  srv.Get("/api/v1/backends", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(backends_json(view), "application/json");
  });
  add_backend_routes(srv, view);
  // POST /api/v1/backends/{name}/drain | /undrain (the gatekeeper let only the admin role through)
  srv.Post(R"(/api/v1/backends/([^/]+)/(drain|undrain))",
           [&view, &tokens](const httplib::Request& req, httplib::Response& res) {
             const std::string name = req.matches[1];
             const bool on = req.matches[2] == "drain";
             const auto b = actors::find_backend(view.backends, name);
             if (!b) return reply_error(res, 404, "no backend named " + name);
             // Set here too, so the answer's next GET shows it (`scg drain --wait`
             // polls at once); the router, which replicates it, may not have run yet.
             view.backends[*b]->draining = on;
             view.set_draining(name, on);
             auth::admin_caller caller;
             const std::string authorization = req.get_header_value("Authorization");  // the token views it
             if (auto t = auth::bearer_token(authorization)) caller = tokens.find(*t);
             const auto by = who(caller);
             spdlog::get("admin")->info("backend_{} backend={} by={} remote={}", on ? "drain" : "undrain", name, by,
                                        req.remote_addr);
             core::audit(on ? "admin.drain" : "admin.undrain",
                         {{"backend", name}, {"by", by}, {"peer", req.remote_addr}});
             core::record_event(on ? "drain" : "undrain", "backend " + name + (on ? " drained" : " undrained") +
                                                              " by " + by + " from " + req.remote_addr);
             res.set_content(nlohmann::json{{"backend", name}, {"draining", on}}.dump(), "application/json");
           });
  srv.Get("/api/v1/cluster", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(cluster_json(view), "application/json");
  });
  auto listing = [&view](auto render) {
    return [&view, render](const httplib::Request& req, httplib::Response& res) {
      auto q = parse_list_query(req);
      if (auto* error = std::get_if<std::string>(&q)) return reply_error(res, 400, *error);
      reply_json(res, 200, render(view, std::get<list_query>(q)));
    };
  };
  srv.Get("/api/v1/sessions", listing(sessions_json));
  srv.Get("/api/v1/operations", listing(operations_json));
  srv.Get("/api/v1/events", [](const httplib::Request& req, httplib::Response& res) {
    const auto& after = req.get_param_value("after");
    if (after.size() > 19 || after.find_first_not_of("0123456789") != std::string::npos)
      return reply_error(res, 400, "after: expected the seq of an event");
    reply_json(res, 200, events_json(after.empty() ? 0 : std::stoull(after)));
  });
  add_usage_routes(srv, view);
  srv.Get("/", [](const httplib::Request&, httplib::Response& res) { serve_ui(res, "index.html"); });
  srv.Get(R"(/ui/([A-Za-z0-9_.-]+))",
          [](const httplib::Request& req, httplib::Response& res) { serve_ui(res, req.matches[1]); });
  srv.Get("/metrics", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(view), "text/plain; version=0.0.4");
  });
  port_ = start(srv, addr, "admin_addr", thread_);
  if (plane.probe_addr) {
    probe_ = std::make_unique<bounded_server>(limits, global_admin_counters().probe);
    add_probe_routes(*probe_, view);
    try {
      probe_port_ = start(*probe_, *plane.probe_addr, "admin.probe_addr", probe_thread_);
    } catch (...) {
      server_->halt();
      thread_.join();
      throw;
    }
  }
}

admin_http::~admin_http() {
  for (auto* s : {server_.get(), probe_.get()})
    if (s) s->halt();
  for (auto* t : {&thread_, &probe_thread_})
    if (t->joinable()) t->join();
}

}  // namespace scg::admin
