#include "net/call_policies.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <variant>

#include "actors/router_stats.hpp"
#include "auth/rewrite.hpp"
#include "core/audit.hpp"
#include "core/clock.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "core/usage.hpp"
#include "net/interrupter.hpp"
#include "net/net_stats.hpp"

namespace scg::net {

std::optional<std::string_view> find_header(const h2::header_list& metadata, std::string_view key) {
  for (const auto& h : metadata)
    if (h.name == key) return std::string_view(h.value);
  return std::nullopt;
}

// --- auth ------------------------------------------------------------------------

std::optional<refusal> check_grpc_call(const std::string& path, const std::string& content_type, bool bad_method) {
  if (bad_method || content_type.compare(0, 16, "application/grpc") != 0)
    return refusal{core::local_reason::not_grpc,
                   "scg takes gRPC calls (POST, content-type application/grpc), not " +
                       (content_type.empty() ? std::string("a call without a content-type") : content_type)};
  if (path.compare(0, service_prefix.size(), service_prefix) != 0)
    return refusal{core::local_reason::unknown_method,
                   "scg forwards only " + std::string(service_prefix) + "* methods, not " + path};
  return std::nullopt;
}

std::optional<refusal> authenticate(const forward_context& fx, const h2::header_list& metadata, call_facts& facts,
                                    const h2::connection& client) {
  if (!fx.auth) return std::nullopt;
  auto r = fx.auth->authenticate(find_header(metadata, "authorization"),
                                 [&metadata](std::string_view key) { return find_header(metadata, key); });
  if (auto* fail = std::get_if<auth::failure>(&r)) {
    core::audit("auth.failure", {{"rpc", rpc_name(facts.kind)}, {"reason", fail->reason},
                                 {"request_id", facts.request_id}, {"peer", client.peer()}});
    return refusal{core::local_reason::unauthenticated, "scg: " + fail->reason};
  }
  facts.identity = std::get<auth::identity>(std::move(r));
  return std::nullopt;
}

// --- the first message, rewrite --------------------------------------------------------

std::optional<refusal> scan_first(const forward_context& fx, call_facts& facts, message_reader& body,
                                  const std::string& encoding) {
  const auto limit = fx.limits.max_message_bytes;
  if (!body.readable() && body.too_large())
    return refusal{core::local_reason::request_too_large,
                   "scg: a request message inflates to more than limits.max_message_bytes (" + std::to_string(limit) +
                       ") bytes"};
  if (!body.readable())
    return refusal{core::local_reason::unreadable_encoding,
                   "request message is compressed with grpc-encoding \"" + encoding +
                       "\", which scg cannot read (gzip or deflate only)"};
  if (auto scan = scan_request(facts.kind, body.view(), facts.fields); !scan)
    return refusal{core::local_reason::invalid_message, not_valid_text(facts.kind) + ": " + scan.reason};
  return std::nullopt;
}

std::string not_valid_text(rpc kind) {
  return std::string("request is not a valid ") + std::string(rpc_name(kind)) + " message";
}

void user_rewrite::decide(const forward_context& fx, call_facts& facts) {
  const std::string sent_user = facts.fields.user_id;
  if (facts.identity.verified) facts.fields.user_id = facts.identity.user_id;
  facts.spark_user = fx.qualify_users && !facts.identity.tenant.empty()
                         ? auth::spark_user_id(facts.identity.tenant, facts.fields.user_id, fx.default_tenant)
                         : facts.fields.user_id;
  active_ = facts.identity.verified || facts.spark_user != sent_user;
}

bool user_rewrite::apply(held_message& msg, message_reader& body, const std::string& user) {
  if (!body.readable()) return false;
  auto rewritten = auth::rewrite_user_id(body.text(), user);
  if (!rewritten) return false;
  msg = message_of(*rewritten, msg);
  body.replace(std::move(*rewritten));
  return true;
}

// --- learning ids --------------------------------------------------------------------

const response_fields* response_view::fields() {
  if (!scanned_) {
    scanned_ = true;
    valid_ = body_.readable() && scan_response(kind_, body_.view(), fields_);
  }
  return valid_ ? &fields_ : nullptr;
}

void id_learning::operation(forward_context& fx, call_facts& facts, execution_claim& execution,
                            const std::string& op) {
  facts.operation_id = op;
  execution.adopt(fx, facts.kind, op, facts.identity.tenant);
  // Its start goes with it to every replica (max_execution_secs counts from it).
  const auto started = execution.started_ms() > 0 ? core::wall_of(execution.started_ms()) : 0;
  fx.table->add_op(op, facts.backend_index, facts.key, core::now_ms(), started);
  core::bump(actors::global_router_stats().router_operations_learned_total);
  fx.router->operation_started(facts.key, op);
}

std::string id_learning::first_response(forward_context& fx, call_facts& facts, execution_claim& execution,
                                        response_view& response) {
  learned_ = true;
  const auto* f = response.fields();
  if (!f) return {};  // passed on as is
  if (facts.kind == rpc::execute_plan && facts.fields.operation_id.empty() && !f->operation_id.empty())
    operation(fx, facts, execution, f->operation_id);
  if (facts.kind != rpc::clone_session) return {};
  const auto& id = !f->new_session_id.empty() ? f->new_session_id : facts.fields.new_session_id;
  if (id.empty()) return {};
  return actors::session_key{facts.identity.tenant, facts.fields.user_id, id}.str();
}

void id_learning::on_success(forward_context& fx, const call_facts& facts) {
  const auto& f = facts.fields;
  if (facts.kind == rpc::release_session && !f.session_id.empty()) {
    fx.router->session_released(facts.key);
  } else if (facts.kind == rpc::release_execute && f.release_all) {
    fx.executions.finish(f.operation_id);
    if (!fx.table->erase_op(f.operation_id)) return;
    core::bump(actors::global_router_stats().router_operations_released_total);
    fx.router->operation_released(facts.key, f.operation_id);
  }
}

// --- redaction -------------------------------------------------------------------------

void redact_config(const forward_context& fx, held_message& msg, message_reader& body) {
  if (!body.readable()) return;
  const auto& text = body.text();
  const auto secrets = fx.backend_tokens.all();
  const bool suspect = text.find("token") != std::string::npos ||
                       std::any_of(secrets.begin(), secrets.end(), [&](const std::string& t) {
                         return !t.empty() && text.find(t) != std::string::npos;
                       });
  if (!suspect) return;
  std::string redacted;
  if (auth::redact_config_response(text, redacted, secrets) != auth::redact_outcome::redacted) return;
  msg = message_of(redacted, msg);
  body.replace(std::move(redacted));
  core::bump(global_net_stats().config_redactions_total);
}

// --- interrupts --------------------------------------------------------------------------

std::optional<execution_limit::time_point> execution_limit::arm(const forward_context& fx, const call_facts& facts,
                                                               const execution_claim& execution,
                                                               const std::optional<time_point>& deadline) {
  if (!is_execution(facts.kind) || execution.waits()) return std::nullopt;
  const auto secs = fx.limits.for_tenant(facts.identity.tenant).max_execution_secs;
  if (secs <= 0) return std::nullopt;
  // Counted from the operation's start (a reattach continues it).
  const auto since_start = std::chrono::milliseconds(std::max<std::int64_t>(0, core::now_ms() - execution.started_ms()));
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(secs) - since_start;
  if (deadline && limit >= *deadline) return std::nullopt;
  limit_ = limit;
  return limit;
}

std::string execution_limit::kill(forward_context& fx, const call_facts& facts, execution_claim& execution) {
  const auto& f = facts.fields;
  const auto& op = !facts.operation_id.empty() ? facts.operation_id : f.operation_id;
  const auto& tenant = facts.identity.tenant;
  if (!op.empty())
    send_interrupt(*facts.backend, f.session_id, facts.spark_user, op, fx.backend_tokens.for_tenant(tenant),
                   facts.request_id);
  execution.kill(fx);
  core::audit("execution.killed", {{"tenant", tenant}, {"user", f.user_id}, {"session", f.session_id},
                                   {"operation", op}, {"backend", facts.backend->name},
                                   {"request_id", facts.request_id}});
  return killed_message(fx, tenant, op);
}

// --- accounting ----------------------------------------------------------------------------

void call_accounting::end(const forward_context& fx, const call_facts& facts, int final_code, bool reached,
                          std::chrono::steady_clock::time_point started) const {
  const auto now = std::chrono::steady_clock::now();
  if (fx.usage) {
    core::call_usage u;
    u.method = facts.kind;
    u.rejection = rejection_;
    u.execution = reached && facts.kind == rpc::execute_plan;
    if (reached && is_execution(facts.kind))
      u.execution_ms = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - upstream_started_).count());
    u.result_bytes = result_bytes_;
    u.result_rows = result_rows_;
    fx.usage->record_call(facts.identity.tenant, facts.fields.user_id, u, core::wall_now_ms());
  }
  if (final_code != 0 && final_code != core::grpc_code::cancelled)
    core::audit("rpc.error", {{"tenant", facts.identity.tenant}, {"user", facts.fields.user_id},
                              {"session", facts.fields.session_id}, {"rpc", rpc_name(facts.kind)},
                              {"backend", facts.backend ? std::string_view(facts.backend->name) : std::string_view()},
                              {"code", core::status_code_name(final_code)}, {"request_id", facts.request_id}});
  global_net_stats().count_rpc(facts.kind, final_code);
  global_net_stats().observe_duration(
      facts.kind,
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - started).count()));
}

// --- local answers -------------------------------------------------------------------------

local_answer make_local_answer(core::local_reason why, const std::string& message,
                               std::chrono::milliseconds retry_after, bool retry_unavailable, bool with_headers) {
  const auto& row = core::reply_of(why);
  local_answer a{row.code, {}};
  std::string details;
  if (row.retry_later) {
    if (retry_unavailable) a.code = core::grpc_code::unavailable;  // limits.retry_status
    details = core::retry_status_details(a.code, message,
                                         retry_after.count() > 0 ? retry_after : std::chrono::milliseconds(1000));
  }
  if (with_headers) {
    a.status.push_back({":status", "200"});
    a.status.push_back({"content-type", "application/grpc"});
  }
  a.status.push_back({"grpc-status", std::to_string(a.code)});
  if (!message.empty()) a.status.push_back({"grpc-message", h2::percent_encode(message)});
  if (!details.empty()) a.status.push_back({"grpc-status-details-bin", h2::base64_encode(details)});
  return a;
}

void log_local_answer(spdlog::logger& log, core::local_reason why, int code, const std::string& message,
                      const call_facts& facts, const h2::connection& client) {
  static std::array<core::log_throttle, core::local_reason_count> throttles;
  const auto& row = core::reply_of(why);
  const auto level = row.level == core::reply_level::debug  ? spdlog::level::debug
                     : row.level == core::reply_level::info ? spdlog::level::info
                                                            : spdlog::level::warn;
  if (!log.should_log(level)) return;
  std::int64_t held = 0;
  if (level != spdlog::level::debug && (held = throttles[static_cast<std::size_t>(row.reason)].pass()) < 0) return;
  log.log(level, "{} request_id={} rpc={} backend={} peer={} code={} suppressed={} message=\"{}\"", row.name,
          facts.request_id, rpc_name(facts.kind), facts.backend ? facts.backend->name : std::string("-"),
          client.peer(), core::status_code_name(code), held, message);
}

}  // namespace scg::net
