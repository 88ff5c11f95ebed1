#include "net/admin_http.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>

#include "core/metrics.hpp"

namespace scg::net {

namespace {

/// Splits "host:port" / "[v6]:port"; the config validated the form.
std::pair<std::string, int> split_host_port(const std::string& addr) {
  auto colon = addr.rfind(':');
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(addr.substr(colon + 1))};
}

/// A Prometheus label value with \, " and newlines escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

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

}  // namespace

std::string backends_json(const admin_view& view) {
  auto bound = view.table->sessions_per_backend(view.backends.size());
  auto list = nlohmann::json::array();
  for (std::size_t i = 0; i < view.backends.size(); ++i) {
    const auto& b = *view.backends[i];
    list.push_back({{"name", b.name},
                    {"address", b.address},
                    {"ui_url", b.ui_url},
                    {"healthy", b.reachable.load() && b.healthy.load()},
                    {"draining", b.draining.load()},
                    {"removed", b.removed.load()},
                    {"score", score_of(view, i, bound)},
                    {"utilization", utilization_of(b)},
                    {"sessions", i < bound.size() ? bound[i] : 0},
                    {"in_flight", b.in_flight.load()}});
  }
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
                         {"replication_lag_ms", m.lag_ms}});
  } else {
    members.push_back({{"name", view.node_name}, {"address", ""}, {"status", "self"},
                       {"last_seen_ms_ago", 0}, {"replication_lag_ms", 0}});
  }
  return nlohmann::json{{"node", view.node_name},
                        {"synced", view.synced.load()},
                        {"conflicts", view.cluster ? view.cluster->conflicts() : 0},
                        {"members", members}}
      .dump();
}

std::string metrics_text(const admin_view& view) {
  std::string out;
  core::global_metrics().render(out);
  auto gauge = [&](const char* name, const char* help, const char* type) {
    out += std::string("# HELP scg_") + name + " " + help + "\n# TYPE scg_" + name + " " + type + "\n";
  };
  gauge("sessions_active", "Sessions bound on this replica", "gauge");
  out += "scg_sessions_active " + std::to_string(view.table->session_count()) + "\n";
  gauge("operations_active", "Operations in the operation index", "gauge");
  out += "scg_operations_active " + std::to_string(view.table->op_count()) + "\n";

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
    gauge(s.name, s.help, s.type);
    for (auto i : shown)
      out += std::string("scg_") + s.name + "{backend=\"" + label(view.backends[i]->name) + "\"} " +
             s.value(i) + "\n";
  }
  return out;
}

admin_http::admin_http(const std::string& addr, admin_view& view)
    : server_(std::make_unique<httplib::Server>()) {
  auto& srv = *server_;
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  srv.Get("/readyz", [&view](const httplib::Request&, httplib::Response& res) {
    bool ready = view.ready.load() && view.synced.load();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
  });
  srv.Get("/api/v1/backends", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(backends_json(view), "application/json");
  });
  // POST /api/v1/backends/{name}/drain | /undrain
  srv.Post(R"(/api/v1/backends/([^/]+)/(drain|undrain))",
           [&view](const httplib::Request& req, httplib::Response& res) {
             const std::string name = req.matches[1];
             const bool on = req.matches[2] == "drain";
             if (!actors::find_backend(view.backends, name)) {
               res.status = 404;
               res.set_content(nlohmann::json{{"error", "no backend named " + name}}.dump(),
                               "application/json");
               return;
             }
             view.set_draining(name, on);
             spdlog::get("admin")->info("backend_{} backend={} remote={}", on ? "drain" : "undrain", name,
                                        req.remote_addr);
             res.set_content(nlohmann::json{{"backend", name}, {"draining", on}}.dump(), "application/json");
           });
  srv.Get("/api/v1/cluster", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(cluster_json(view), "application/json");
  });
  srv.Get("/metrics", [&view](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(view), "text/plain; version=0.0.4");
  });
  auto [host, port] = split_host_port(addr);
  port_ = port == 0 ? srv.bind_to_any_port(host) : (srv.bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) throw std::runtime_error("cannot listen for admin HTTP on admin_addr " + addr);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

admin_http::~admin_http() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace scg::net
