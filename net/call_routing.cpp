#include "net/call_routing.hpp"

#include <string_view>

#include "actors/placement.hpp"
#include "core/clock.hpp"
#include "core/tracing.hpp"
#include "core/usage.hpp"
#include "net/h2/grpc_frames.hpp"
#include "net/artifact_spool.hpp"
#include "net/session_journal.hpp"

namespace scg::net {

namespace {

/// choose_backend's view of the session table: it refreshes what it finds,
/// and a backend down for on_backend_lost.after_secs is lost.
struct table_lookup final : route_lookup {
  forward_context& fx;
  const std::string& op_id;
  const std::string& key;
  const core::clock_ms now;
  table_lookup(forward_context& f, const std::string& o, const std::string& k, core::clock_ms n)
      : fx(f), op_id(o), key(k), now(n) {}
  std::optional<binding> operation() override {
    auto op = fx.table->find_op(op_id, now);
    if (!op) return std::nullopt;
    return state(op->backend);
  }
  std::optional<binding> session() override {
    auto b = fx.table->find_session(key, now);
    if (!b) return std::nullopt;
    return state(*b);
  }
  binding state(actors::backend_index b) const {
    const auto& backend = *fx.backends[b];
    return binding{b, actors::lost(backend, now, fx.lost_after_ms), actors::down(backend)};
  }
};

/// Request headers scg does not pass on as they came: HTTP/2 hop headers,
/// the ones scg sets itself, and the client's credential (it is for scg,
/// never for the backend).
bool not_forwarded(std::string_view key) {
  static constexpr std::string_view dropped[] = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
      "host", "content-type", "grpc-timeout", "x-request-id", "authorization"};
  if (!key.empty() && key[0] == ':') return true;
  for (auto d : dropped)
    if (key == d) return true;
  return false;
}

}  // namespace

route_decision decide_route(forward_context& fx, const call_facts& facts, bool op_asked) {
  table_lookup table{fx, facts.fields.operation_id, facts.key, core::now_ms()};
  return choose_backend(facts.kind, facts.fields, fx.backends.size(), fx.lost_action_for(facts.identity.tenant), table,
                        op_asked);
}

std::optional<actors::backend_index> any_backend(forward_context& fx, const std::string& tenant) {
  const auto n = fx.backends.size();
  auto it = fx.pools.find(tenant);
  const auto* pool = it == fx.pools.end() ? nullptr : &it->second;
  auto start = fx.cursor.fetch_add(1, std::memory_order_relaxed);
  std::optional<actors::backend_index> fallback;
  for (std::size_t k = 0; k < n; ++k) {
    const auto i = static_cast<actors::backend_index>((start + k) % n);
    if (!actors::in_pool(pool, fx.backends[i]->name)) continue;
    if (actors::eligible(*fx.backends[i])) return i;
    if (!fallback) fallback = i;
  }
  return fallback;
}

refusal route_refusal(const forward_context& fx, const call_facts& facts, const route_decision& d) {
  if (d.refusal == core::local_reason::operation_lost) {
    const auto& lost = *fx.backends[d.backend];
    return {d.refusal, "scg: operation " + facts.fields.operation_id.substr(0, 64) + " ran on backend " + lost.name +
                           " (" + lost.address +
                           "), which was lost; its results are gone. Run it again: the session goes on "
                           "(on_backend_lost.action: replay)"};
  }
  if (d.refusal != core::local_reason::backend_lost) return {d.refusal, "scg: no backends are configured"};
  const auto& lost = *fx.backends[d.backend];
  return {core::local_reason::backend_lost, "scg: the session's backend " + lost.name + " (" + lost.address +
                                                ") was lost; start a new session (on_backend_lost.action: fail)"};
}

backend_request::backend_request(const h2::header_list& metadata, const std::string& method,
                                 const std::string& content_type, const std::string& address,
                                 const std::string& request_id, const call_span& span, const std::string& token,
                                 const std::optional<std::chrono::steady_clock::time_point>& deadline, bool limited) {
  if (span.started()) traceparent_ = core::format_traceparent(span.trace());
  if (!token.empty()) authorization_ = "Bearer " + token;
  if (deadline)
    timeout_ = h2::format_timeout(*deadline - std::chrono::steady_clock::now() +
                                  (limited ? std::chrono::seconds(1) : std::chrono::seconds(0)));
  headers_.reserve(metadata.size() + 8);
  headers_.push_back({":method", "POST"});
  headers_.push_back({":scheme", "http"});
  headers_.push_back({":path", method});
  headers_.push_back({":authority", address});
  headers_.push_back({"te", "trailers"});
  headers_.push_back({"content-type", content_type});
  for (const auto& h : metadata)
    if (!not_forwarded(h.name) && !(span.started() && h.name == "traceparent")) headers_.push_back({h.name, h.value});
  headers_.push_back({"x-request-id", request_id});
  if (span.started()) headers_.push_back({"traceparent", traceparent_});  // scg's span is the parent
  if (!authorization_.empty()) headers_.push_back({"authorization", authorization_});
  if (deadline) headers_.push_back({"grpc-timeout", timeout_});
}

std::string configure(forward_context& fx, const config::gateway& cfg) {
  fx.limits = cfg.limits;
  fx.lost_after_ms = std::int64_t{cfg.on_backend_lost.after_secs} * 1000;
  fx.on_lost = cfg.on_backend_lost.action;
  fx.tenant_lost = cfg.on_backend_lost.tenants;
  if (cfg.on_backend_lost.any_replay()) {
    const auto& lost = cfg.on_backend_lost;
    std::string error;
    auto spool = artifact_spool::open(lost.spool_dir,
                                      {static_cast<std::size_t>(lost.max_artifacts_mib) << 20,
                                       static_cast<std::size_t>(lost.max_spool_mib) << 20},
                                      error);
    if (!spool) return "on_backend_lost.spool_dir: " + error;
    fx.journal = std::make_shared<journal_store>(
        journal_limits{static_cast<std::size_t>(lost.max_journal_kib) << 10,
                       static_cast<std::size_t>(lost.max_journal_total_mib) << 20},
        std::move(spool));
  }
  for (const auto& [tenant, names] : cfg.security.tenants.pools) fx.pools[tenant] = names;
  fx.qualify_users = cfg.security.tenants.qualify_users;
  fx.default_tenant = cfg.security.tenants.default_tenant;
  core::global_usage().configure({static_cast<std::size_t>(cfg.accounting.max_tenants),
                                  static_cast<std::size_t>(cfg.accounting.max_users),
                                  static_cast<std::size_t>(cfg.accounting.prometheus_users)});
  fx.usage = &core::global_usage();
  return {};
}

}  // namespace scg::net
