#include "admin/usage_http.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <unordered_map>

#include "actors/placement.hpp"
#include "core/clock.hpp"
#include "core/prometheus.hpp"
#include "core/usage.hpp"
#include "admin/admin_http.hpp"

namespace scg::admin {

namespace {

using core::usage_ledger;

std::string seconds(std::uint64_t ms) { return std::to_string(static_cast<double>(ms) / 1000.0); }

/// The pools placement chooses from: one per tenants.pools entry, and "_all"
/// (every backend) for tenants without one. Each with its members as placement sees them.
struct pool_view {
  std::string name;
  std::vector<actors::candidate> members;
  std::vector<std::string> backend_names;
};

std::vector<pool_view> pools_of(const admin_view& view) {
  const auto bound = view.table->sessions_per_backend(view.backends.size());
  auto one = [&](const std::string& name, const std::vector<std::string>* names) {
    pool_view p{name, {}, {}};
    for (std::size_t i = 0; i < view.backends.size(); ++i) {
      const auto& b = *view.backends[i];
      // One entry per name (an entry superseded on reload is left out), as /metrics shows backends.
      if (actors::find_backend(view.backends, b.name) != i || !actors::in_pool(names, b.name)) continue;
      p.members.push_back({actors::eligible(b), i < bound.size() ? bound[i] : 0, actors::polled_utilization(b)});
      p.backend_names.push_back(b.name);
    }
    return p;
  };
  std::vector<pool_view> out;
  out.push_back(one(std::string(actors::all_pool), nullptr));
  for (const auto& [tenant, names] : view.pools) out.push_back(one(tenant, &names));
  return out;
}

void append_pool_metrics(core::prometheus_writer& w, const admin_view& view) {
  const auto pools = pools_of(view);
  std::vector<actors::pool_load> loads;
  for (const auto& p : pools) loads.push_back(actors::load_of_pool(view.policy, p.members));
  const auto sheds = core::global_pool_sheds().snapshot();
  auto each = [&](const char* name, const char* help, const char* type, auto value) {
    w.family(name, help, type);
    for (std::size_t i = 0; i < pools.size(); ++i) w.sample({{"pool", pools[i].name}}, value(i));
  };
  each("pool_backends", "Backends in the pool (tenants.pools; _all: every backend)", "gauge",
       [&](std::size_t i) { return loads[i].backends; });
  each("pool_backends_eligible", "Backends of the pool that can take a new session (healthy, not draining)", "gauge",
       [&](std::size_t i) { return loads[i].eligible; });
  each("pool_sessions", "Sessions bound to the pool's backends", "gauge",
       [&](std::size_t i) { return loads[i].sessions; });
  each("pool_saturation", "Mean placement score of the pool's eligible backends; 1 when none is eligible", "gauge",
       [&](std::size_t i) { return loads[i].saturation; });
  each("pool_sessions_shed_total", "New sessions of the pool's tenants shed (placement.shed_above)", "counter",
       [&](std::size_t i) {
         auto it = sheds.find(pools[i].name);
         return it == sheds.end() ? 0 : it->second;
       });
  w.family("pool_score", "Placement score of the pool's eligible backends: min, mean, max (0 with none)", "gauge");
  for (std::size_t i = 0; i < pools.size(); ++i) {
    w.sample({{"pool", pools[i].name}, {"stat", "min"}}, loads[i].score_min);
    w.sample({{"pool", pools[i].name}, {"stat", "mean"}}, loads[i].score_mean);
    w.sample({{"pool", pools[i].name}, {"stat", "max"}}, loads[i].score_max);
  }
}

/// The execution figures both a tenant's and a user's series show.
struct execution_column {
  const char* tenant_name;
  const char* tenant_help;
  const char* user_name;
  const char* user_help;
  std::string (*value)(const core::usage_figures&);
};
const execution_column execution_columns[] = {
    {"tenant_executions_total", "ExecutePlan calls of the tenant that reached a backend", "user_executions_total",
     "ExecutePlan calls of the user that reached a backend",
     [](const core::usage_figures& f) { return std::to_string(f.executions); }},
    {"tenant_execution_seconds_total",
     "Time the tenant's execution streams (ExecutePlan, ReattachExecute) were open", "user_execution_seconds_total",
     "Time the user's execution streams were open",
     [](const core::usage_figures& f) { return seconds(f.execution_ms); }},
    {"tenant_result_bytes_total", "ExecutePlanResponse message bytes streamed to the tenant",
     "user_result_bytes_total", "ExecutePlanResponse message bytes streamed to the user",
     [](const core::usage_figures& f) { return std::to_string(f.result_bytes); }},
    {"tenant_result_rows_total", "Rows streamed to the tenant: the sum of arrow_batch.row_count",
     "user_result_rows_total", "Rows streamed to the user (arrow_batch.row_count)",
     [](const core::usage_figures& f) { return std::to_string(f.result_rows); }},
    {"tenant_replays_total", "Sessions of the tenant replayed on a new server (on_backend_lost: replay)",
     "user_replays_total", "Sessions of the user replayed on a new server",
     [](const core::usage_figures& f) { return std::to_string(f.replays); }},
    {"tenant_replay_seconds_total", "Time the tenant's session replays took", "user_replay_seconds_total",
     "Time the user's session replays took", [](const core::usage_figures& f) { return seconds(f.replay_ms); }},
};

void append_tenant_metrics(core::prometheus_writer& w, const admin_view& view) {
  const auto& usage = *view.usage;
  const auto totals = usage.totals();
  auto each = [&](const char* name, const char* help, auto value) {
    w.family(name, help, "counter");
    for (const auto& t : totals) w.sample({{"tenant", t.tenant}}, value(t.figures));
  };
  each("tenant_sessions_total", "New sessions placed for the tenant (counted by the replica that decided)",
       [](const auto& f) { return std::to_string(f.sessions); });
  for (const auto& c : execution_columns) each(c.tenant_name, c.tenant_help, c.value);
  w.family("tenant_rpcs_total", "Calls of the tenant finished, by method", "counter");
  for (const auto& t : totals)
    for (std::size_t r = 0; r < core::rpc_count; ++r)
      if (t.rpcs[r] > 0) w.sample({{"tenant", t.tenant}, {"method", core::rpc_name(static_cast<core::rpc>(r))}}, t.rpcs[r]);
  w.family("tenant_rejections_total", "Calls of the tenant scg answered itself, by reason (core/local_reply.hpp)",
           "counter");
  for (const auto& t : totals)
    for (std::size_t r = 0; r < core::local_reason_count; ++r)
      if (t.rejections[r] > 0) w.sample({{"tenant", t.tenant}, {"reason", core::local_replies()[r].name}}, t.rejections[r]);
  // Live sessions: every tenant with sessions, those not kept by name under "_other".
  std::unordered_map<std::string, std::size_t> live;
  for (const auto& t : totals) live.emplace(t.tenant, 0);
  for (const auto& [tenant, n] : view.table->sessions_by_tenant())
    (live.count(tenant) ? live[tenant] : live[std::string(usage_ledger::other)]) += n;
  w.family("tenant_sessions_active", "Sessions of the tenant bound now (the cluster's, as this replica's table holds them)",
           "gauge");
  for (const auto& t : totals) w.sample({{"tenant", t.tenant}}, live[t.tenant]);
  if (live.count(std::string(usage_ledger::other)) && !std::any_of(totals.begin(), totals.end(), [](const auto& t) {
        return t.tenant == usage_ledger::other;
      }))
    w.sample({{"tenant", usage_ledger::other}}, live[std::string(usage_ledger::other)]);
  w.family("accounting_tenant_overflows_total",
           "Calls and sessions counted under tenant _other: accounting.max_tenants reached", "counter")
      .sample(usage.tenant_overflows());
  w.family("accounting_user_overflows_total", "Calls and sessions counted under user _other: accounting.max_users reached",
           "counter")
      .sample(usage.user_overflows());

  const auto top = usage.top_users(usage.options().prometheus_users);
  if (top.empty()) return;
  auto user = [&](const char* name, const char* help, auto value) {
    w.family(name, help, "counter");
    for (const auto& u : top) w.sample({{"tenant", u.tenant}, {"user", u.user}}, value(u.figures));
  };
  user("user_rpcs_total", "Calls of the user (the accounting.prometheus_users users with the most)",
       [](const auto& f) { return std::to_string(f.rpcs); });
  for (const auto& c : execution_columns) user(c.user_name, c.user_help, c.value);
}

nlohmann::json figures_json(const core::usage_figures& f) {
  return {{"sessions", f.sessions},         {"executions", f.executions},
          {"execution_seconds", static_cast<double>(f.execution_ms) / 1000.0},
          {"result_bytes", f.result_bytes}, {"result_rows", f.result_rows},
          {"rpcs", f.rpcs},                 {"rejections", f.rejections},
          {"replays", f.replays},           {"replay_seconds", static_cast<double>(f.replay_ms) / 1000.0}};
}

}  // namespace

void append_usage_metrics(core::prometheus_writer& w, const admin_view& view) {
  if (view.usage) append_tenant_metrics(w, view);
  append_pool_metrics(w, view);
}

std::variant<usage_query, std::string> parse_usage_query(const std::string& by, const std::string& window,
                                                         const std::string& limit, const std::string& tenant) {
  usage_query q;
  if (!by.empty()) {
    if (by != "tenant" && by != "user") return std::string("by: expected tenant or user, not \"" + by.substr(0, 32) + "\"");
    q.by_user = by == "user";
  }
  if (!window.empty()) {
    const auto unit = window.back();
    const auto digits = window.substr(0, window.size() - 1);
    if ((unit != 'm' && unit != 'h') || digits.empty() || digits.size() > 4 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return std::string("window: expected minutes or hours such as 15m or 1h, not \"" + window.substr(0, 32) + "\"");
    const auto minutes = std::stoll(digits) * (unit == 'h' ? 60 : 1);
    if (minutes < 1 || minutes > core::usage_window_minutes)
      return std::string("window: from 1m to 60m (scg keeps the last hour by minute), not " + window);
    q.minutes = minutes;
  }
  if (!limit.empty()) {
    if (limit.size() > 9 || limit.find_first_not_of("0123456789") != std::string::npos || std::stoul(limit) == 0)
      return std::string("limit: expected a positive integer");
    q.limit = std::min<std::size_t>(std::stoul(limit), usage_query::max_limit);
  }
  q.tenant = tenant;
  return q;
}

std::string usage_json(const admin_view& view, const usage_query& q, std::int64_t now_ms) {
  std::size_t total = 0;
  auto rows = view.usage->window(q.by_user, q.minutes, now_ms, q.limit, &total, q.tenant);
  auto list = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json item = figures_json(r.figures);
    item["tenant"] = r.tenant;
    if (q.by_user) item["user"] = r.user;
    list.push_back(std::move(item));
  }
  return nlohmann::json{{"node", view.node_name},
                        {"by", q.by_user ? "user" : "tenant"},
                        {"window_minutes", q.minutes},
                        {"rows", list},
                        {"total_rows", total},
                        {"truncated", total > rows.size()}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string pools_json(const admin_view& view) {
  auto list = nlohmann::json::array();
  for (const auto& p : pools_of(view)) {
    const auto l = actors::load_of_pool(view.policy, p.members);
    list.push_back({{"pool", p.name},
                    {"backends", p.backend_names},
                    {"eligible", l.eligible},
                    {"sessions", l.sessions},
                    {"score", {{"min", l.score_min}, {"mean", l.score_mean}, {"max", l.score_max}}},
                    {"saturation", l.saturation}});
  }
  return nlohmann::json{{"pools", list}}.dump();
}

void add_usage_routes(httplib::Server& srv, const admin_view& view) {
  srv.Get("/api/v1/usage", [&view](const httplib::Request& req, httplib::Response& res) {
    auto error = [&](int status, const std::string& message) {
      res.status = status;
      res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
    };
    if (!view.usage) return error(404, "accounting is off on this replica");
    auto q = parse_usage_query(req.get_param_value("by"), req.get_param_value("window"),
                               req.get_param_value("limit"), req.get_param_value("tenant"));
    if (auto* why = std::get_if<std::string>(&q)) return error(400, *why);
    res.set_content(usage_json(view, std::get<usage_query>(q), core::wall_now_ms()), "application/json");
  });
  srv.Get("/api/v1/pools", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(pools_json(view), "application/json");
  });
}

}  // namespace scg::admin
