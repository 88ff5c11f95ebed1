// The flow of one RPC through scg, start to end:
//
//   1. a client opens an HTTP/2 stream (net/h2: one worker thread owns its
//      connection and, from then on, the call); the request headers are the
//      call's metadata: its bearer token is checked and its tenant resolved
//      (authenticate, on auth/authenticator.hpp), its method named, its
//      grpc-timeout read;
//   2. the first request message is gathered whole (net/relay.hpp) and its
//      routing fields scanned (net/wire.hpp) — plans are never parsed; the
//      verified user replaces user_context.user_id (user_rewrite); rate
//      limits and the tenant's bulkheads apply (net/admission.hpp);
//   3. the backend is found (net/choose_backend.hpp decides, route() acts):
//      operation index first for Reattach/Release/Interrupt, then the
//      session table; a brand-new session asks the router actor (which, in a
//      cluster, asks the key's owner replica) and is answered through a
//      callback posted back to the worker (no thread blocks); a session
//      whose backend is lost is rebound, replayed (net/call_replay.hpp) or
//      refused (on_backend_lost);
//   4. a stream opens on the worker's connection to that backend with the
//      client's metadata (its authorization replaced by scg's backend token),
//      the remaining grpc-timeout and an x-request-id (with `tracing:`, a
//      traceparent naming scg's span: net/call_span.hpp);
//   5. bytes flow both ways as they arrive, unparsed and uncopied: a relay
//      each way (net/relay.hpp) splits them into gRPC messages and holds one
//      whole only when scg must read it (net/h2/bytes.hpp carries them); a
//      stream's HTTP/2 window is given back only once its bytes were framed
//      on the other side, so a slow reader slows its own producer and nobody
//      else's (the worker bounds what it holds: net/h2/worker.hpp, check_budget);
//   6. operation ids and cloned sessions are learned from the first response
//      (id_learning);
//   7. the backend's headers, trailers and status (with details) go back to
//      the client unchanged (a Config response has the backend's own token
//      redacted: redact_config; a grpc-status that is not one made INTERNAL);
//      an execution past its tenant's max_execution_secs is interrupted on
//      the backend (execution_limit, net/interrupter.hpp); at its end,
//      call_accounting records what the call cost.
//
// What scg decides about a call besides moving its bytes lives in policies
// (net/call_policies.hpp: auth, rewrite, admission, learning ids,
// redaction, accounting, interrupts), called at named points: headers,
// first message, first response, end.
// How far a call has come through these steps is its phase (enum phase, above
// forward_call).
// Whatever scg answers itself (a refusal, a limit, a backend it cannot
// reach) goes through finish_local(reason, message): one row of
// core/local_reply.hpp says its status, counters and log line.
#include "net/forwarder.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <optional>
#include <string_view>

#include "actors/router_stats.hpp"
#include "core/ids.hpp"
#include "core/local_reply.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "net/admission.hpp"
#include "net/call_policies.hpp"
#include "net/call_replay.hpp"
#include "net/call_span.hpp"
#include "net/call_streams.hpp"
#include "net/call_routing.hpp"
#include "net/choose_backend.hpp"
#include "net/h2/endpoints.hpp"
#include "net/h2/grpc_frames.hpp"
#include "net/h2/worker.hpp"
#include "net/net_stats.hpp"
#include "net/relay.hpp"
#include "net/wire.hpp"

namespace scg::net {

namespace {

using actors::backend_index;
using h2::slice;
using reason = core::local_reason;

/// The "forward" logger, looked up once (the registry takes a lock).
spdlog::logger& forward_log() {
  static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  return *log;
}

/// Execution responses up to this size are read whole (for result_complete).
constexpr std::uint32_t small_response_bytes = 512;

// Where a call is in its life. It only moves forward (advance()), each step made in one place:
//
//   receiving ──> routing ──> connecting ──> streaming ──> finishing
//       │            │            │              │             │
//       └────────────┴────────────┴──────┬───────┴─────────────┘
//                                        v
//                                     finished
//
//   receiving   headers read; the first message (or the request's end) awaited
//   routing     route(): read, admitted, its backend chosen or the router asked
//   connecting  start_upstream(): the backend stream is submitted; nothing came back yet
//   streaming   on_response_headers_done(): the backend answered; messages flow
//   finishing   finish_with_backend_status(): the backend's status waits behind
//               CloneSession's held answer for the clone's binding (on_clone_bound)
//   finished    conclude(): the status is decided (scg's, the backend's, or the
//               client cancelled); bytes that still come are dropped
//
// Orthogonal to it: each direction's end (request_ended_, down_closed_,
// up_closed_), the client's response headers being out (response_started_:
// their submit can fail), and what each direction's relay holds.
enum class phase : std::uint8_t { receiving, routing, connecting, streaming, finishing, finished };

/// One RPC: the phase machine, and the policies called at its named points
/// (net/call_policies.hpp); its streams, and what flows on them, are the
/// call_streams it is (net/call_streams.hpp).
class forward_call final : public h2::server_stream,
                           public h2::client_stream,
                           public call_streams,
                           public std::enable_shared_from_this<forward_call> {
 public:
  forward_call(forward_context& fx, h2::downstream_connection& down, std::int32_t stream)
      : call_streams(down, stream, fx.limits.max_message_bytes),
        fx_(fx),
        log_(forward_log()),
        started_(std::chrono::steady_clock::now()) {
    global_net_stats().forward_active_calls.fetch_add(1, std::memory_order_relaxed);
    w_.calls.fetch_add(1, std::memory_order_relaxed);
    metadata_.reserve(16);
    response_headers_.reserve(8);
  }

  /// The call's end: both streams closed (call_streams then drops what they still hold).
  ~forward_call() override {
    execution_.settle(fx_, facts_.identity.tenant, final_code_);
    accounting_.end(fx_, facts_, final_code_, facts_.backend && up_stream_ > 0, started_);
    global_net_stats().forward_active_calls.fetch_sub(1, std::memory_order_relaxed);
    if (counted_stream_) global_net_stats().forward_active_streams.fetch_sub(1, std::memory_order_relaxed);
    if (facts_.backend && up_stream_ > 0) facts_.backend->in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (fx_.tracer && span_.started())
      span_.end(*fx_.tracer, method_, facts_.backend ? &facts_.backend->name : nullptr, facts_.identity.tenant,
                facts_.request_id, final_code_);
    w_.calls.fetch_sub(1, std::memory_order_relaxed);
  }

  // --- 1. the request's headers --------------------------------------------------

  void on_request_header(std::string_view name, std::string_view value) override {
    if (name == ":path") method_ = value;
    else if (name == "content-type") content_type_ = value;
    else if (name == "grpc-encoding") request_encoding_ = value;
    else if (name == "grpc-timeout") timeout_ = h2::parse_timeout(value);
    else if (name == ":method" && value != "POST") bad_method_ = true;
    metadata_.push_back({std::string(name), std::string(value)});
  }

  void on_request_headers_too_large(std::size_t limit) override { header_limit_hit_ = limit; }

  void on_request_headers_done() override {
    facts_.kind = rpc_from_path(method_);
    auto rid = find_header(metadata_, "x-request-id");
    facts_.request_id = rid ? std::string(*rid) : core::new_request_id();
    if (fx_.tracer) span_.start(find_header(metadata_, "traceparent"));
    if (header_limit_hit_ > 0)
      return finish_local(reason::headers_too_large, "scg: the request's header block is larger than " +
                                                         std::to_string(header_limit_hit_ >> 10) +
                                                         " KiB (SETTINGS_MAX_HEADER_LIST_SIZE)");
    if (timeout_) arm_timer(std::chrono::steady_clock::now() + *timeout_);
    if (auto no = check_grpc_call(method_, content_type_, bad_method_)) return finish_local(no->reason, no->message);
    if (auto no = authenticate(fx_, metadata_, facts_, *down_)) finish_local(no->reason, no->message);
  }

  // --- 2. the request's messages ---------------------------------------------------

  void on_request_data(slice s) override {
    request_side side{*this};
    requests_.feed(std::move(s), side);
  }

  void on_request_end() override {
    request_ended_ = true;
    if (finished()) return;
    if (phase_ == phase::receiving) return route(false);
    if (up_stream_ > 0) {
      to_backend_.ended = true;
      up_->resume(up_stream_);
    }
  }

  /// "N bytes<joint> larger than limits.max_message_bytes (M)".
  std::string over_limit(std::size_t length, const char* joint) const {
    return std::to_string(length) + " bytes" + joint + " larger than limits.max_message_bytes (" +
           std::to_string(fx_.limits.max_message_bytes) + ")";
  }

  /// The client→backend relay's side (net/relay.hpp).
  struct request_side {
    forward_call& c;
    bool finished() const { return c.finished(); }
    void give_back(std::size_t n) { c.down_->consume(c.down_stream_, n); }
    void wake() { c.up_->resume(c.up_stream_); }
    void refuse(const h2::message_header& h) {
      c.finish_local(reason::request_too_large, "scg: a request message of " + c.over_limit(h.length, " is"));
    }
    bool begin(const h2::message_header& h) {
      core::bump(global_net_stats().forward_request_bytes_total, h.length);
      // Read whole: the first request, before routing; every request when
      // the verified user is written into it, or (replay) its ids are
      // translated or it is spooled.
      return c.phase_ < phase::connecting || c.users_.active() || c.journal_.translating() || c.journal_.spooling();
    }
    void body(const slice&) {}
    void end() {}
    void whole(held_message msg) { c.on_request_message(std::move(msg)); }
  };

  void on_request_message(held_message msg) {
    if (phase_ == phase::receiving) {
      first_ = std::move(msg);
      return route(true);
    }
    // Later messages (AddArtifacts) carry the verified user too, and are
    // spooled for replay: one reader (one inflate) for both.
    if (users_.active() || journal_.spooling()) {
      message_reader body(msg, request_encoding_, fx_.limits.max_message_bytes);
      if (users_.active() && !user_rewrite::apply(msg, body, facts_.spark_user))
        return finish_local(reason::invalid_message, not_valid_text(facts_.kind));
      if (journal_.spooling()) journal_.spool(body);
    }
    if (journal_.translating()) journal_.request(facts_.kind, msg);
    if (up_stream_ > 0) {
      send_to_backend(std::move(msg));
    } else {
      waiting_.push_back(std::move(msg));  // routing is under way
    }
  }

  // --- 3. routing ------------------------------------------------------------------

  /// Reads the first message's routing fields (when there is one), applies
  /// the first-message policies and finds its backend. The message is
  /// inflated (when compressed) once, for the scan, the rewrite and admission.
  void route(bool has_message) {
    advance(phase::routing);
    std::optional<message_reader> body;
    if (has_message) {
      body.emplace(first_, request_encoding_, fx_.limits.max_message_bytes);
      if (auto no = scan_first(fx_, facts_, *body, request_encoding_)) return finish_local(no->reason, no->message);
    }
    users_.decide(fx_, facts_);
    if (users_.active() && has_message && !user_rewrite::apply(first_, *body, facts_.spark_user))
      return finish_local(reason::invalid_message, not_valid_text(facts_.kind));
    has_first_message_ = has_message;
    // The first message (an ExecutePlan) asks for a reattachable execution; true without a message.
    auto reattachable = [&] { return !body || (body->readable() && asks_reattachable(body->text())); };
    if (auto no = execution_.admit(fx_, facts_.kind, facts_.fields, facts_.identity.tenant, facts_.request_id,
                                   reattachable))
      return finish_local(no->reason, no->message, no->retry_after);
    facts_.key = actors::session_key{facts_.identity.tenant, facts_.fields.user_id, facts_.fields.session_id}.str();
    if (has_message) journal_.first_message(fx_, facts_, *body);
    route_by_tables(false);
  }

  /// The backend from the tables, else the router's (`op_asked`: the cluster
  /// was asked for the call's operation id and knew nothing).
  /// `unsettled`: the router's refusal for an operation id nobody knew while
  /// the cluster settles; it ends the call only if its session is unknown here
  /// too (placing it would pick a backend the operation is likely not on).
  void route_by_tables(bool op_asked, const actors::route_result* unsettled = nullptr) {
    const auto& f = facts_.fields;
    const auto d = decide_route(fx_, facts_, op_asked);
    const bool new_here = d.action == route_action::resolve || d.action == route_action::resolve_held;
    if (unsettled && new_here) return finish_local(unsettled->refusal, unsettled->error);
    switch (d.action) {
      case route_action::use: return start_upstream(d.backend);
      case route_action::any:
        if (auto b = any_backend(fx_, facts_.identity.tenant)) return start_upstream(*b);
        return finish_local(reason::no_backend, "scg: tenant " + facts_.identity.tenant.substr(0, 64) +
                                                    "'s pool (tenants.pools) names no configured backend");
      case route_action::resolve_op:
        return fx_.router->find_operation(f.operation_id, facts_.key, op_answer_on_worker());
      case route_action::resolve: return fx_.router->resolve(facts_.key, answer_on_worker());
      case route_action::resolve_held:
        return fx_.router->resolve_held(facts_.key, f.session_id, facts_.spark_user, f.observed_server_session,
                                        answer_on_worker());
      case route_action::rebind: return fx_.router->rebind(facts_.key, answer_on_worker());
      case route_action::replay:
        replay_from_ = d.backend;
        return fx_.router->rebind(facts_.key, answer_on_worker());
      case route_action::wait: return wait_for_backend(op_asked);
      case route_action::refuse: {
        const auto no = route_refusal(fx_, facts_, d);  // none configured, the session's backend lost, an operation lost
        return finish_local(no.reason, no.message);
      }
    }
  }

  /// A router callback that continues this call on its worker.
  /// The wait, from the ask to the answer here, is scg_router_decision_seconds.
  std::function<void(actors::route_result)> answer_on_worker() {
    return [self = shared_from_this(), asked = std::chrono::steady_clock::now()](actors::route_result r) {
      auto& w = self->w_;
      w.post([self, asked, r = std::move(r)] {
        auto& m = actors::global_router_stats();
        const auto waited = std::chrono::steady_clock::now() - asked;
        m.router_decision.observe(core::decision_bounds_us, static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(waited).count()));
        self->on_route(r);
      });
    };
  }

  /// The router's answer for an operation id this replica missed, on this
  /// call's worker: its backend (unless lost), else routing by session (or
  /// the router's refusal while the cluster settles, for an unknown session).
  std::function<void(actors::route_result)> op_answer_on_worker() {
    return [self = shared_from_this()](actors::route_result r) {
      self->w_.post([self, r = std::move(r)] {
        if (self->finished()) return;
        const auto now = core::now_ms();
        if (r.backend && *r.backend < self->fx_.backends.size() &&
            !actors::lost(*self->fx_.backends[*r.backend], now, self->fx_.lost_after_ms))
          return self->start_upstream(*r.backend);
        const bool unsettled = !r.backend && r.refusal == reason::operation_unsettled;
        self->route_by_tables(true, unsettled ? &r : nullptr);
      });
    };
  }

  /// The router's answer for a new or rebound session.
  void on_route(const actors::route_result& r) {
    if (finished()) return;
    if (!r.backend) return finish_local(r.refusal, r.error, std::chrono::milliseconds(r.retry_after_ms));
    log_.debug("session_bound request_id={} rpc={} backend={}", facts_.request_id, rpc_name(facts_.kind),
               fx_.backends[*r.backend]->name);
    if (replay_from_) return replay_on(*r.backend);
    start_upstream(*r.backend);
  }

  /// The session moved to `b` from its lost backend: its journal is
  /// replayed there first (net/call_replay.hpp).
  void replay_on(backend_index b) {
    replay_session(fx_, facts_, *replay_from_, b, [self = shared_from_this(), b](std::optional<refusal> no) {
      self->w_.post([self, b, no = std::move(no)] {
        if (self->finished()) return;
        if (no) return self->finish_local(no->reason, no->message);
        self->start_upstream(b);
      });
    });
  }

  /// replay: the backend is down, not yet lost. The call waits (a client's
  /// retry of UNAVAILABLE would back off for up to a minute) and is routed
  /// again every 250 ms: to its backend when it is back, to a replay once it
  /// is lost; a backend never found lost in time is answered unavailable.
  void wait_for_backend(bool op_asked) {
    if (!wait_until_) wait_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(fx_.lost_after_ms + 5000);
    if (std::chrono::steady_clock::now() >= *wait_until_)
      return finish_local(reason::backend_unavailable, "scg: the session's backend is down, and was not found lost "
                                                       "within on_backend_lost.after_secs");
    if (!wait_timer_) wait_timer_ = std::make_unique<asio::steady_timer>(w_.io());
    wait_timer_->expires_after(std::chrono::milliseconds(250));
    wait_timer_->async_wait([weak = weak_from_this(), op_asked](const asio::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->finished()) return;
      self->route_by_tables(op_asked);
      self->w_.flush_dirty();
    });
  }

  // --- 4. the backend stream ---------------------------------------------------------

  void start_upstream(backend_index b) {
    if (finished()) return;
    if (fx_.backends.empty()) return finish_local(reason::no_backend, "scg: no backends are configured");
    advance(phase::connecting);
    facts_.backend_index = b;
    facts_.backend = fx_.backends[b];
    auto& backend = *facts_.backend;
    if (facts_.kind == rpc::execute_plan && !facts_.fields.operation_id.empty())
      id_learning::operation(fx_, facts_, execution_, facts_.fields.operation_id);
    journal_.translate_first(fx_, facts_, has_first_message_ ? &first_ : nullptr);

    // An execution longer than its tenant may run is cut at its limit, then interrupted.
    auto deadline = deadline_;
    if (auto limit = limit_.arm(fx_, facts_, execution_, deadline)) {
      deadline = limit;
      arm_timer(*limit);
    }
    const backend_request request(metadata_, method_, content_type_, backend.address, facts_.request_id, span_,
                                  fx_.backend_tokens.for_tenant(facts_.identity.tenant), deadline, limit_.armed());

    up_ = w_.upstream(b, backend.address, fx_.limits.connect_timeout_ms);
    to_client_.producer = up_;
    // replay: a one-message request is kept, to go again should the backend refuse the connection.
    if (fx_.journal && has_first_message_ && facts_.kind != rpc::add_artifacts && facts_.kind != rpc::unknown)
      again_ = share(first_);
    if (has_first_message_) send_to_backend(std::move(first_));
    for (auto& m : waiting_) {
      if (journal_.translating()) journal_.request(facts_.kind, m);
      send_to_backend(std::move(m));
    }
    waiting_.clear();
    to_backend_.ended = request_ended_;
    backend.in_flight.fetch_add(1, std::memory_order_relaxed);
    backend.calls_total.fetch_add(1, std::memory_order_relaxed);
    accounting_.reached_backend();
    if (!is_unary(facts_.kind) || !has_first_message_) {
      counted_stream_ = true;
      global_net_stats().forward_active_streams.fetch_add(1, std::memory_order_relaxed);
    }
    log_.debug("forward request_id={} rpc={} backend={}", facts_.request_id, rpc_name(facts_.kind), backend.name);
    const auto id = up_->submit_request(request.headers(), to_backend_, shared_from_this());
    if (id <= 0) {
      backend.in_flight.fetch_sub(1, std::memory_order_relaxed);
      return on_client_stream_closed(NGHTTP2_INTERNAL_ERROR, std::string("cannot open a stream: ") + nghttp2_strerror(id));
    }
    up_stream_ = id;
    to_client_.producer_stream = id;
  }

  // --- 5, 6. the backend's stream: its headers, messages and first response ----------

  void on_response_header(std::string_view name, std::string_view value, bool trailer) override {
    (trailer ? backend_trailers_ : response_headers_).push_back({std::string(name), std::string(value)});
    if (!trailer && name == "grpc-encoding") response_encoding_ = value;
  }

  void on_response_headers_done(bool trailer, bool end_stream) override {
    if (finished()) return;
    if (phase_ == phase::connecting) advance(phase::streaming);  // the backend answered
    again_.reset();
    if (!trailer && !end_stream) {
      // A stream shows the backend's headers at once (a long query shows
      // them before its first result).
      response_started_ = down_->submit_response(down_stream_, response_headers_, &to_client_);
      return;
    }
    // The status: in trailers, or in the headers of a trailers-only answer.
    auto& status = trailer ? backend_trailers_ : response_headers_;
    finish_with_backend_status(status, !trailer);
  }

  void on_response_data(slice s) override {
    response_side side{*this};
    responses_.feed(std::move(s), side);
  }

  /// The backend→client relay's side (net/relay.hpp).
  struct response_side {
    forward_call& c;
    bool finished() const { return c.finished(); }
    void give_back(std::size_t n) { c.up_->consume(c.up_stream_, n); }
    void wake() { c.down_->resume(c.down_stream_); }
    void refuse(const h2::message_header& h) {  // the client still gets every message before this one
      c.finish_local(reason::response_too_large,
                     "scg: backend " + c.facts_.backend->name + " sent a message of " + c.over_limit(h.length, ","),
                     {}, true);
    }
    bool begin(const h2::message_header& h) {
      core::bump(global_net_stats().forward_response_bytes_total, h.length);
      const auto kind = c.facts_.kind;
      if (is_execution(kind)) c.accounting_.result(h, c.fx_.usage != nullptr);  // results: bytes, and rows as they pass
      // The first answer of the RPCs scg learns from (or redacts) is read
      // whole; so are small execution responses, to see the result complete
      // (Spark sends it alone, a few dozen bytes).
      return (c.responses_.messages() == 0 &&
              (kind == rpc::config || kind == rpc::execute_plan || kind == rpc::clone_session)) ||
             (c.execution_.has_operation() && h.length <= small_response_bytes) || c.journal_.translating();
    }
    void body(const slice& s) { c.accounting_.body(s); }
    void end() { c.accounting_.response_end(); }
    void whole(held_message msg) { c.on_response_message(std::move(msg)); }
  };

  /// A response read whole: the first-response policies, then on to the
  /// client (a clone's answer once its binding is in force). It is
  /// inflated and scanned at most once, whoever reads it.
  void on_response_message(held_message msg) {
    response_view response(msg, facts_.kind, response_encoding_, fx_.limits.max_message_bytes);
    if (learning_.wants_first(facts_.kind)) {
      auto clone = learning_.first_response(fx_, facts_, execution_, response);
      if (!clone.empty()) bind_clone(clone);
    }
    if (execution_.has_operation() && !execution_.result_complete() && msg.header.length <= small_response_bytes) {
      const auto* f = response.fields();  // ExecutePlanResponse.result_complete: the operation's last response
      execution_.set_result_complete(f && f->result_complete);
    }
    if (facts_.kind == rpc::config) redact_config(fx_, msg, response.body());
    if (journal_.translating()) journal_.response(facts_.kind, msg);
    if (clone_pending_) {
      clone_answer_ = std::move(msg);
      return;
    }
    send_to_client(std::move(msg));
  }

  /// The answer waits until the cloned session's binding is at the key's
  /// owner (on_response_message holds it), so its first call may reach any replica.
  void bind_clone(const std::string& key) {
    clone_pending_ = true;
    fx_.router->bind_clone(key, facts_.backend_index, [self = shared_from_this()](actors::route_result) {
      self->w_.post([self] { self->on_clone_bound(); });
    });
  }

  /// The cloned session's binding is in force (at the key's owner too): its
  /// answer, and the status that came after it, go on to the client.
  void on_clone_bound() {
    clone_pending_ = false;
    // Answered meanwhile (scg's own answer: shutdown, a deadline): the client
    // has its one status, so the held answer and status are dropped.
    if (finished()) {
      clone_answer_ = held_message{};
      pending_status_.reset();
      return;
    }
    send_to_client(std::move(clone_answer_));
    clone_answer_ = held_message{};
    if (pending_status_) {
      auto status = std::move(*pending_status_);
      pending_status_.reset();
      finish_with_backend_status(status, false);
    }
    w_.flush_dirty();
  }

  // --- 7. the end: streams closing, deadlines, the status ---------------------------

  void on_client_stream_closed(std::uint32_t error_code, const std::string& why) override {
    up_closed_ = true;
    to_backend_.drop();
    if (phase_ >= phase::finishing) return;  // finishing: on_clone_bound finishes
    auto& backend = *facts_.backend;
    if (phase_ < phase::streaming) {
      // Nothing came from the backend: the gateway could not reach it.
      backend.unavailable_total.fetch_add(1, std::memory_order_relaxed);
      if (again_ && !response_started_) return route_again();
      const std::string cause = !why.empty() ? why : "stream reset (HTTP/2 error " + std::to_string(error_code) + ")";
      return finish_local(reason::backend_unavailable,
                          "scg: backend " + backend.name + " (" + backend.address + ") is unavailable: " + cause);
    }
    if (error_code == NGHTTP2_NO_ERROR && why.empty()) return finish_without_status();
    finish_local(core::reason_of_reset(error_code, !why.empty()),
                 "scg: backend " + backend.name + " broke off the stream: " +
                     (why.empty() ? "HTTP/2 error " + std::to_string(error_code) : why));
  }

  void on_server_stream_closed(std::uint32_t error_code) override {
    down_closed_ = true;
    to_client_.drop();
    if (!finished()) {  // the client went away or cancelled before its answer
      conclude(core::grpc_code::cancelled);
      log_.debug("cancelled request_id={} rpc={} http2_error={}", facts_.request_id, rpc_name(facts_.kind), error_code);
    }
    cancel_backend();
  }

  /// replay: the backend refused the connection before it answered (a
  /// server just killed, not yet seen down): the call is routed again, as
  /// when its backend is down (wait_for_backend), with its kept message.
  void route_again() {
    facts_.backend->in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (counted_stream_) global_net_stats().forward_active_streams.fetch_sub(1, std::memory_order_relaxed);
    counted_stream_ = false;
    up_stream_ = 0;
    up_closed_ = false;
    first_ = std::move(*again_);
    again_.reset();
    wait_for_backend(false);
  }

  /// The deadline or the execution limit came (whichever is first).
  void arm_timer(std::chrono::steady_clock::time_point at) {
    if (!deadline_ || at < *deadline_) deadline_ = at;
    if (!timer_) timer_ = std::make_unique<asio::steady_timer>(w_.io());
    timer_->expires_at(*deadline_);
    timer_->async_wait([weak = weak_from_this()](const asio::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->finished()) return;
      if (self->limit_.reached()) {
        self->kill_execution();
      } else {
        self->finish_local(reason::deadline, "Deadline Exceeded");
      }
      self->w_.flush_dirty();
    });
  }

  /// The execution outlived max_execution_secs: the backend is told to stop
  /// it, the client why its stream ended (a reattach is told the same).
  void kill_execution() {
    finish_local(reason::execution_too_long, execution_limit::kill(fx_, facts_, execution_));
  }

  bool finished() const { return phase_ == phase::finished; }

  /// Moves the call on to phase `p`. It never goes back: that would be a
  /// bug, asserted in debug builds; a release build logs it and stays.
  void advance(phase p) {
    if (p < phase_) {
      assert(!"a call's phase moved backwards");
      static core::log_throttle throttle;
      if (auto held = throttle.pass(); held >= 0)
        log_.error("phase_backwards request_id={} rpc={} from={} to={} suppressed={}", facts_.request_id,
                   rpc_name(facts_.kind), static_cast<int>(phase_), static_cast<int>(p), held);
      return;
    }
    phase_ = p;
  }

  /// The call's status is `code`: the one way into phase::finished.
  void conclude(int code) {
    advance(phase::finished);
    final_code_ = code;
    if (code != 0) journal_.on_failure(fx_, facts_);
  }

  /// The backend's status ends the call; scg replaces it only to say what
  /// scg did (an execution it cut, a stream message it refused).
  void finish_with_backend_status(h2::header_list& status, bool trailers_only) {
    if (clone_pending_ && !trailers_only) {  // after the held answer (on_clone_bound)
      pending_status_ = std::move(status);
      advance(phase::finishing);
      return;
    }
    const auto& backend = *facts_.backend;
    const h2::header* grpc_status = nullptr;
    for (const auto& h : status)
      if (h.name == "grpc-status") grpc_status = &h;
    if (!grpc_status) return finish_without_status();
    const auto parsed = core::parse_grpc_status(grpc_status->value);
    if (!parsed)
      return finish_local(reason::backend_bad_status, "scg: backend " + backend.name + " sent grpc-status \"" +
                                                          grpc_status->value.substr(0, 32) + "\", not a status code");
    const int code = *parsed;
    if (code == core::grpc_code::deadline_exceeded && limit_.reached()) return kill_execution();
    if (code == 0) {
      id_learning::on_success(fx_, facts_);
      journal_.on_success(fx_, facts_);
    }
    log_.debug("done request_id={} rpc={} backend={} code={}", facts_.request_id, rpc_name(facts_.kind), backend.name,
               core::status_code_name(code));
    conclude(code);
    if (trailers_only) {
      down_->submit_response(down_stream_, status, nullptr);
      to_client_.drop();
      return;
    }
    end_answer(std::move(status));
  }

  /// Ends the call with a status scg produced itself, for `why` (one row of
  /// core/local_reply.hpp: its code, counters and log event; a "retry later"
  /// row also gets a google.rpc.RetryInfo of `retry_after`, 1 s by default,
  /// which Spark clients honour). Trailers follow what the client already has
  /// (and, with `keep_queued`, the responses scg holds for it), or make a
  /// trailers-only answer; the backend stream, if any, is cancelled.
  void finish_local(reason why, const std::string& message, std::chrono::milliseconds retry_after = {},
                    bool keep_queued = false) {
    if (finished()) return;
    auto answer = make_local_answer(why, message, retry_after, fx_.limits.retry_unavailable, !response_started_);
    core::count_local_reply(why);
    accounting_.rejected(why);
    log_local_answer(log_, why, answer.code, message, facts_, *down_);
    conclude(answer.code);
    cancel_backend();
    to_backend_.drop();
    if (!keep_queued) to_client_.drop();
    if (down_closed_) return;
    if (!response_started_) {
      down_->submit_response(down_stream_, answer.status, nullptr);
      return;
    }
    end_answer(std::move(answer.status));
  }

  /// The backend's stream ended, its trailers (if any) without grpc-status.
  void finish_without_status() {
    finish_local(reason::backend_no_status,
                 "scg: backend " + facts_.backend->name + " ended the stream without a gRPC status");
  }

 public:
  /// Cancels the call at the shutdown deadline.
  void abandon(const std::string& why) { finish_local(reason::shutting_down, why); }

  // --- the worker's housekeeping -------------------------------------------------

  std::size_t held_bytes() const override {
    std::size_t n = streams_held() + first_.bytes.bytes() + clone_answer_.bytes.bytes() +
                    (again_ ? again_->bytes.bytes() : 0);
    for (const auto& m : waiting_) n += m.bytes.bytes();
    return n;
  }

  std::size_t compact() override {
    std::size_t n = streams_compact() + first_.bytes.compact() + clone_answer_.bytes.compact() +
                    (again_ ? again_->bytes.compact() : 0);
    for (auto& m : waiting_) n += m.bytes.compact();
    return n;
  }

  void shed(const std::string& why) override {
    if (finished()) return;
    finish_local(reason::buffer_shed, why);
  }

  /// A client that opened a stream and trickles (or never sends) its first
  /// message holds a call: it ends after limits.first_message_secs.
  void tick(h2::steady_time now) override {
    const auto limit = w_.tune().first_message_timeout;
    if (finished() || request_ended_ || requests_.messages() > 0 || limit.count() <= 0 || now - started_ < limit)
      return;
    finish_local(reason::first_message_timeout,
                 "scg: the request's first message did not arrive within " + std::to_string(limit.count() / 1000) +
                     " s of its headers (limits.first_message_secs)");
  }

 private:
  forward_context& fx_;
  spdlog::logger& log_;
  const std::chrono::steady_clock::time_point started_;

  // the request as it came
  h2::header_list metadata_;
  std::string method_, content_type_, request_encoding_, response_encoding_;
  std::optional<std::chrono::nanoseconds> timeout_;
  bool bad_method_ = false;
  std::size_t header_limit_hit_ = 0;  // the header block passed this many bytes: the rest was dropped

  // what scg holds besides its relays
  held_message first_;                 // the first request, read before routing
  std::optional<held_message> again_;  // replay: first_ again, should its backend refuse the connection
  std::vector<held_message> waiting_;  // messages that came while routing
  h2::header_list response_headers_, backend_trailers_;

  // progress
  phase phase_ = phase::receiving;
  bool has_first_message_ = false;  // route() had a message to read (not only the request's end)
  bool request_ended_ = false;      // the client half-closed its stream (END_STREAM)
  bool counted_stream_ = false;     // counted in active streams
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::unique_ptr<asio::steady_timer> timer_;
  std::unique_ptr<asio::steady_timer> wait_timer_;  // replay: routed again while the backend is down
  std::optional<std::chrono::steady_clock::time_point> wait_until_;
  std::optional<backend_index> replay_from_;         // replay: the lost backend the session moves from
  int final_code_ = 0;
  bool clone_pending_ = false;                     // CloneSession's answer waits for its binding
  held_message clone_answer_;
  std::optional<h2::header_list> pending_status_;  // the backend's status, after clone_answer_
  call_span span_;                                 // started only when tracing

  // what the call knows, and its policies (net/call_policies.hpp)
  call_facts facts_;
  user_rewrite users_;
  execution_claim execution_;  // admission: its part in the tenant's executions (net/admission.hpp)
  execution_limit limit_;
  id_learning learning_;
  call_journal journal_;  // replay: journaling and id translation (net/call_replay.hpp)
  call_accounting accounting_;
};

}  // namespace

std::shared_ptr<h2::server_stream> start_forward(forward_context& fx, h2::downstream_connection& down,
                                                 std::int32_t stream) {
  return std::make_shared<forward_call>(fx, down, stream);
}

void abandon_call(h2::server_stream& call, const std::string& why) {
  static_cast<forward_call&>(call).abandon(why);
}

}  // namespace scg::net
