// The flow of one RPC through scg, start to end:
//
//   1. a client opens an HTTP/2 stream (net/h2: one worker thread owns its
//      connection and, from then on, the call); the request headers are the
//      call's metadata: its bearer token is checked and its tenant resolved
//      (auth/authenticator.hpp), its method named, its grpc-timeout read;
//   2. the first request message is gathered and its routing fields scanned
//      (net/wire.hpp) — plans are never parsed; the verified user replaces
//      user_context.user_id; rate limits and the tenant's bulkheads apply
//      (net/admission.hpp);
//   3. the backend is found (net/choose_backend.hpp decides, route() acts):
//      operation index first for Reattach/Release/Interrupt, then the
//      session table; a brand-new session asks the router actor (which, in a
//      cluster, asks the key's owner replica) and is answered through a
//      callback posted back to the worker (no thread blocks); a session
//      whose backend is lost is rebound or refused (on_backend_lost);
//   4. a stream opens on the worker's connection to that backend with the
//      client's metadata (its authorization replaced by scg's backend token),
//      the remaining grpc-timeout and an x-request-id (with `tracing:`, a
//      traceparent naming scg's span: net/call_span.hpp);
//   5. bytes flow both ways as they arrive, unparsed and uncopied (net/h2/
//      bytes.hpp); a stream's HTTP/2 window is given back only once its bytes
//      were framed on the other side, so a slow reader slows its own
//      producer and nobody else's (the worker bounds what it holds: net/h2/
//      worker.hpp, check_budget);
//   6. operation ids and cloned sessions are learned from the first response;
//   7. the backend's headers, trailers and status (with details) go back to
//      the client unchanged (a Config response has the backend's own token
//      redacted, a grpc-status that is not one made INTERNAL); an execution
//      past its tenant's max_execution_secs is interrupted on the backend
//      (net/interrupter.hpp).
//
// How far a call has come through these steps is its phase (enum phase, above
// forward_call).
// Whatever scg answers itself (a refusal, a limit, a backend it cannot
// reach) goes through finish_local(reason, message): one row of
// core/local_reply.hpp says its status, counters and log line.
#include "net/forwarder.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "actors/placement.hpp"
#include "auth/authenticator.hpp"
#include "auth/rewrite.hpp"
#include "core/audit.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/local_reply.hpp"
#include "core/metrics.hpp"
#include "core/throttle.hpp"
#include "core/usage.hpp"
#include "net/admission.hpp"
#include "net/call_span.hpp"
#include "net/choose_backend.hpp"
#include "net/h2/endpoints.hpp"
#include "net/h2/grpc_frames.hpp"
#include "net/h2/worker.hpp"
#include "net/interrupter.hpp"
#include "net/wire.hpp"

namespace scg::net {

namespace {

using actors::backend_index;
using h2::slice;
using reason = core::local_reason;

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

/// The "forward" logger, looked up once (the registry takes a lock).
spdlog::logger& forward_log() {
  static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  return *log;
}

/// Execution responses up to this size are read whole (for result_complete).
constexpr std::uint32_t small_response_bytes = 512;

/// One whole gRPC message as it arrived: its prefix and body, in slices.
struct held_message {
  h2::slice_queue bytes;
  h2::message_header header;

  /// The body as scanner segments (the 5-byte prefix skipped).
  segments body() const {
    segments out;
    std::size_t skip = 5;
    bytes.for_each([&](const slice& s) {
      const auto from = std::min(skip, s.size());
      skip -= from;
      if (from < s.size())
        out.push_back({reinterpret_cast<const std::uint8_t*>(s.data()) + from, s.size() - from});
    });
    return out;
  }
  std::string flat_body() const {
    std::string out;
    out.reserve(header.length);
    for (const auto& seg : body()) out.append(reinterpret_cast<const char*>(seg.data), seg.size);
    return out;
  }
};

// Where a call is in its life. It only moves forward, each step made in one place:
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
// their submit can fail), and what each direction holds of its current message.
enum class phase : std::uint8_t { receiving, routing, connecting, streaming, finishing, finished };

class forward_call final : public h2::server_stream,
                           public h2::client_stream,
                           public std::enable_shared_from_this<forward_call> {
 public:
  forward_call(forward_context& fx, h2::downstream_connection& down, std::int32_t stream)
      : fx_(fx),
        w_(down.owner()),
        down_(std::static_pointer_cast<h2::downstream_connection>(down.shared_from_this())),
        down_stream_(stream),
        log_(forward_log()),
        started_(std::chrono::steady_clock::now()) {
    core::global_metrics().forward_active_calls.fetch_add(1, std::memory_order_relaxed);
    w_.calls.fetch_add(1, std::memory_order_relaxed);
    to_backend_.producer = down_;
    to_backend_.producer_stream = stream;
    metadata_.reserve(16);
    response_headers_.reserve(8);
  }

  /// The call's end: both streams closed.
  ~forward_call() override {
    to_client_.drop();
    to_backend_.drop();
    if (!request_prefix_.empty()) down_->consume(down_stream_, request_prefix_.bytes());
    if (up_ && !response_prefix_.empty()) up_->consume(up_stream_, response_prefix_.bytes());
    execution_.settle(fx_, identity_.tenant, final_code_);
    if (fx_.usage) account();
    if (final_code_ != 0 && final_code_ != core::grpc_code::cancelled)
      core::audit("rpc.error", {{"tenant", identity_.tenant}, {"user", fields_.user_id},
                                {"session", fields_.session_id}, {"rpc", rpc_name(rpc_)},
                                {"backend", backend_ ? std::string_view(backend_->name) : std::string_view()},
                                {"code", core::status_code_name(final_code_)}, {"request_id", request_id_}});
    core::global_metrics().count_rpc(rpc_, final_code_);
    core::global_metrics().observe_duration(
        rpc_, static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::steady_clock::now() - started_)
                                             .count()));
    core::global_metrics().forward_active_calls.fetch_sub(1, std::memory_order_relaxed);
    if (counted_stream_) core::global_metrics().forward_active_streams.fetch_sub(1, std::memory_order_relaxed);
    if (backend_ && up_stream_ > 0) backend_->in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (fx_.tracer && span_.started())
      span_.end(*fx_.tracer, method_, backend_ ? &backend_->name : nullptr, identity_.tenant, request_id_, final_code_);
    w_.calls.fetch_sub(1, std::memory_order_relaxed);
  }

  // --- the client's stream ------------------------------------------------------

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
    rpc_ = rpc_from_path(method_);
    auto rid = find_header("x-request-id");
    request_id_ = rid ? std::string(*rid) : core::new_request_id();
    if (fx_.tracer) span_.start(find_header("traceparent"));
    if (header_limit_hit_ > 0)
      return finish_local(reason::headers_too_large, "scg: the request's header block is larger than " +
                                                         std::to_string(header_limit_hit_ >> 10) +
                                                         " KiB (SETTINGS_MAX_HEADER_LIST_SIZE)");
    if (timeout_) arm_timer(std::chrono::steady_clock::now() + *timeout_);
    if (bad_method_ || content_type_.compare(0, 16, "application/grpc") != 0) {
      return finish_local(reason::not_grpc,
                          "scg takes gRPC calls (POST, content-type application/grpc), not " +
                              (content_type_.empty() ? std::string("a call without a content-type") : content_type_));
    }
    if (method_.compare(0, service_prefix.size(), service_prefix) != 0) {
      return finish_local(reason::unknown_method,
                          "scg forwards only " + std::string(service_prefix) + "* methods, not " + method_);
    }
    authenticate();
  }

  void on_request_data(slice s) override {
    if (finished()) {  // answered already: what still comes is dropped
      down_->consume(down_stream_, s.size());
      return;
    }
    const auto total = s.size();
    request_sink sink{*this};
    if (!request_split_.feed(std::move(s), sink)) down_->consume(down_stream_, total - sink.passed);
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

  void on_server_stream_closed(std::uint32_t error_code) override {
    down_closed_ = true;
    to_client_.drop();
    if (!finished()) {  // the client went away or cancelled before its answer
      conclude(core::grpc_code::cancelled);
      log_.debug("cancelled request_id={} rpc={} http2_error={}", request_id_, rpc_name(rpc_), error_code);
    }
    cancel_backend();
  }

  // --- the worker's housekeeping -------------------------------------------------

  std::size_t held_bytes() const override {
    std::size_t n = to_client_.data.bytes() + to_backend_.data.bytes() + request_.bytes.bytes() +
                    response_.bytes.bytes() + first_.bytes.bytes() + clone_answer_.bytes.bytes() +
                    request_prefix_.bytes() + response_prefix_.bytes();
    for (const auto& m : waiting_) n += m.bytes.bytes();
    return n;
  }

  std::size_t compact() override {
    std::size_t n = to_client_.data.compact() + to_backend_.data.compact() + request_.bytes.compact() +
                    response_.bytes.compact() + first_.bytes.compact() + clone_answer_.bytes.compact();
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
    if (finished() || request_ended_ || request_split_.messages() > 0 || limit.count() <= 0 || now - started_ < limit)
      return;
    finish_local(reason::first_message_timeout,
                 "scg: the request's first message did not arrive within " + std::to_string(limit.count() / 1000) +
                     " s of its headers (limits.first_message_secs)");
  }

  // --- the backend's stream -----------------------------------------------------

  void on_response_header(std::string_view name, std::string_view value, bool trailer) override {
    (trailer ? backend_trailers_ : response_headers_).push_back({std::string(name), std::string(value)});
    if (!trailer && name == "grpc-encoding") response_encoding_ = value;
  }

  void on_response_headers_done(bool trailer, bool end_stream) override {
    if (finished()) return;
    if (phase_ == phase::connecting) phase_ = phase::streaming;  // the backend answered
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
    if (finished()) {
      up_->consume(up_stream_, s.size());
      return;
    }
    const auto total = s.size();
    response_sink sink{*this};
    if (!response_split_.feed(std::move(s), sink)) up_->consume(up_stream_, total - sink.passed);
  }

  void on_client_stream_closed(std::uint32_t error_code, const std::string& why) override {
    up_closed_ = true;
    to_backend_.drop();
    if (phase_ >= phase::finishing) return;  // finishing: on_clone_bound finishes
    if (phase_ < phase::streaming) {
      // Nothing came from the backend: the gateway could not reach it.
      backend_->unavailable_total.fetch_add(1, std::memory_order_relaxed);
      const std::string cause = !why.empty() ? why : "stream reset (HTTP/2 error " + std::to_string(error_code) + ")";
      return finish_local(reason::backend_unavailable,
                          "scg: backend " + backend_->name + " (" + backend_->address + ") is unavailable: " + cause);
    }
    if (error_code == NGHTTP2_NO_ERROR && why.empty()) return finish_without_status();
    finish_local(core::reason_of_reset(error_code, !why.empty()),
                 "scg: backend " + backend_->name + " broke off the stream: " +
                     (why.empty() ? "HTTP/2 error " + std::to_string(error_code) : why));
  }

 private:
  // --- gRPC messages, both ways ---------------------------------------------------
  // Bytes pass as they come; a message is held whole only when scg must read
  // it (the first request, before routing; every request when the verified
  // user is written into it; the first response of the RPCs scg learns from).

  // Prefix bytes wait in `prefix` until the length was checked: a refused
  // message sends nothing on, and what came before it still goes.
  struct request_sink {
    forward_call& c;
    std::size_t passed = 0;
    void bytes(slice s, bool prefix) {
      passed += s.size();
      if (prefix) return c.request_prefix_.push(std::move(s));
      c.request_bytes(std::move(s));
    }
    bool header(const h2::message_header& h) { return c.request_header(h); }
    void message_end() { c.request_message_end(); }
  };
  struct response_sink {
    forward_call& c;
    std::size_t passed = 0;
    void bytes(slice s, bool prefix) {
      passed += s.size();
      if (prefix) return c.response_prefix_.push(std::move(s));
      if (c.counting_rows_) c.rows_reader_.feed(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
      c.response_bytes(std::move(s));
    }
    bool header(const h2::message_header& h) { return c.response_header(h); }
    void message_end() { c.response_message_end(); }
  };

  void request_bytes(slice s) {
    if (!in_request_) {
      in_request_ = true;
      hold_request_ = phase_ < phase::connecting || rewrite_users_;
    }
    if (finished()) return down_->consume(down_stream_, s.size());
    if (hold_request_) {
      hold(request_, std::move(s), *down_, down_stream_);
    } else {
      to_backend_.push(std::move(s), true);
      up_->resume(up_stream_);
    }
  }

  /// Moves the held prefix of the current message on (bytes() decides where).
  void release_prefix(h2::slice_queue& prefix, void (forward_call::*to)(slice)) {
    prefix.pop(prefix.bytes(), [this, to](slice s) { (this->*to)(std::move(s)); });
  }

  bool request_header(const h2::message_header& h) {
    if (h.length > fx_.limits.max_message_bytes) {
      down_->consume(down_stream_, request_prefix_.bytes());
      request_prefix_.clear();
      finish_local(reason::request_too_large,
                   "scg: a request message of " + std::to_string(h.length) +
                       " bytes is larger than limits.max_message_bytes (" +
                       std::to_string(fx_.limits.max_message_bytes) + ")");
      return false;
    }
    request_.header = h;  // read by request_bytes, which the prefix reaches first
    release_prefix(request_prefix_, &forward_call::request_bytes);
    core::bump(core::global_metrics().forward_request_bytes_total, h.length);
    return true;
  }

  void request_message_end() {
    in_request_ = false;
    if (!hold_request_ || finished()) return;
    held_message msg = std::move(request_);
    request_ = held_message{};
    if (phase_ == phase::receiving) {
      first_ = std::move(msg);
      return route(true);
    }
    // Later messages (AddArtifacts) carry the verified user too.
    if (rewrite_users_ && !rewrite_user(msg)) {
      return finish_local(reason::invalid_message,
                          std::string("request is not a valid ") + std::string(rpc_name(rpc_)) + " message");
    }
    if (up_stream_ > 0) {
      send_held(std::move(msg));
    } else {
      waiting_.push_back(std::move(msg));  // routing is under way
    }
  }

  void send_held(held_message msg) {
    msg.bytes.move_to(to_backend_.data);
    up_->resume(up_stream_);
  }

  /// Keeps `s` in `msg`, a message scg reads whole. Its bytes owe their
  /// window until they leave, as passing bytes do, when the message fits in
  /// the window; a bigger one could never be finished that way, and its
  /// window goes back at once (it is then held outside flow control, up to
  /// limits.max_message_bytes and the worker's buffer budget).
  void hold(held_message& msg, slice s, h2::connection& from, std::int32_t stream) {
    if (msg.header.length + 5 <= w_.tune().stream_window) return msg.bytes.push(std::move(s), true);
    from.consume(stream, s.size());
    msg.bytes.push(std::move(s));
  }

  void response_bytes(slice s) {
    if (!in_response_) {
      in_response_ = true;
      // The first answer of the RPCs scg learns from (or redacts) is read whole.
      hold_response_ = (response_split_.messages() == 0 &&
                        (rpc_ == rpc::config || rpc_ == rpc::execute_plan || rpc_ == rpc::clone_session)) ||
                       // Small execution responses are read to see the result complete
                       // (Spark sends it alone, a few dozen bytes).
                       (execution_.has_operation() && response_.header.length <= small_response_bytes);
    }
    if (finished()) return up_->consume(up_stream_, s.size());
    if (hold_response_) {
      hold(response_, std::move(s), *up_, up_stream_);
    } else {
      to_client_.push(std::move(s), true);
      down_->resume(down_stream_);
    }
  }

  bool response_header(const h2::message_header& h) {
    if (h.length > fx_.limits.max_message_bytes) {
      up_->consume(up_stream_, response_prefix_.bytes());
      response_prefix_.clear();
      // The client still gets every message before this one.
      finish_local(reason::response_too_large,
                   "scg: backend " + backend_->name + " sent a message of " + std::to_string(h.length) +
                       " bytes, larger than limits.max_message_bytes (" +
                       std::to_string(fx_.limits.max_message_bytes) + ")",
                   {}, true);
      return false;
    }
    response_.header = h;  // read by response_bytes, which the prefix reaches first
    release_prefix(response_prefix_, &forward_call::response_bytes);
    core::bump(core::global_metrics().forward_response_bytes_total, h.length);
    if (is_execution(rpc_)) {  // results, for accounting: bytes, and rows as the message passes
      result_bytes_ += h.length;
      counting_rows_ = fx_.usage && !h.compressed;
      if (counting_rows_) rows_reader_.start(h.length);
    }
    return true;
  }

  void response_message_end() {
    in_response_ = false;
    if (counting_rows_) {
      result_rows_ += rows_reader_.rows();
      counting_rows_ = false;
    }
    if (!hold_response_) return;
    held_message msg = std::move(response_);
    response_ = held_message{};
    learn_from_first_response(msg);
    if (execution_.has_operation() && !execution_.result_complete()) note_result_complete(msg);
    if (rpc_ == rpc::config) redact_config(msg);
    if (clone_pending_) {
      clone_answer_ = std::move(msg);
      return;
    }
    pass_held_response(std::move(msg));
  }

  void pass_held_response(held_message msg) {
    msg.bytes.move_to(to_client_.data);
    down_->resume(down_stream_);
  }

  /// The cloned session's binding is in force (at the key's owner too): its
  /// answer, and the status that came after it, go on to the client.
  void on_clone_bound() {
    clone_pending_ = false;
    if (finished() && !pending_status_) return;
    pass_held_response(std::move(clone_answer_));
    clone_answer_ = held_message{};
    if (pending_status_) {
      auto status = std::move(*pending_status_);
      pending_status_.reset();
      finish_with_backend_status(status, false);
    }
    w_.flush_dirty();
  }

  /// The body of `msg` to read: inflated when it came compressed; nullopt
  /// when that fails.
  std::optional<std::string> readable_body(const held_message& msg, const std::string& encoding,
                                           bool* too_large = nullptr) {
    if (!msg.header.compressed) return msg.flat_body();
    return h2::inflate(encoding, msg.flat_body(), fx_.limits.max_message_bytes, too_large);
  }

  /// A message scg wrote in place of `original` (a rewrite): it owes the
  /// window the original took.
  static held_message message_of(std::string_view body, const held_message& original) {
    held_message m;
    m.header.length = static_cast<std::uint32_t>(body.size());
    m.bytes.push_owing(slice::copy_of(h2::message_prefix(body.size()) + std::string(body)), original.bytes.owed());
    return m;
  }

  // --- routing ---------------------------------------------------------------------

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
      return binding{op->backend, actors::lost(*fx.backends[op->backend], now, fx.lost_after_ms)};
    }
    std::optional<binding> session() override {
      auto b = fx.table->find_session(key, now);
      if (!b) return std::nullopt;
      return binding{*b, actors::lost(*fx.backends[*b], now, fx.lost_after_ms)};
    }
  };

  /// Reads the first message's routing fields (when there is one) and finds
  /// its backend.
  void route(bool has_message) {
    phase_ = phase::routing;
    if (has_message) {
      scan_result scan;
      if (first_.header.compressed) {
        bool too_large = false;
        auto body = readable_body(first_, request_encoding_, &too_large);
        if (!body && too_large) {
          return finish_local(reason::request_too_large,
                              "scg: a request message inflates to more than limits.max_message_bytes (" +
                                  std::to_string(fx_.limits.max_message_bytes) + ") bytes");
        }
        if (!body) {
          return finish_local(reason::unreadable_encoding,
                              "request message is compressed with grpc-encoding \"" + request_encoding_ +
                                  "\", which scg cannot read (gzip or deflate only)");
        }
        segments seg{{reinterpret_cast<const std::uint8_t*>(body->data()), body->size()}};
        scan = scan_request(rpc_, seg, fields_);
      } else {
        scan = scan_request(rpc_, first_.body(), fields_);
      }
      if (!scan) {
        return finish_local(reason::invalid_message, std::string("request is not a valid ") +
                                                                    std::string(rpc_name(rpc_)) +
                                                                    " message: " + scan.reason);
      }
    }
    // The user id Spark sees: the verified one, qualified by its tenant
    // (Spark keys sessions by user and session id alone: tenants must not meet).
    const std::string sent_user = fields_.user_id;
    if (identity_.verified) fields_.user_id = identity_.user_id;
    spark_user_ = fx_.qualify_users && !identity_.tenant.empty()
                      ? auth::spark_user_id(identity_.tenant, fields_.user_id, fx_.default_tenant)
                      : fields_.user_id;
    rewrite_users_ = identity_.verified || spark_user_ != sent_user;
    if (rewrite_users_ && has_message && !rewrite_user(first_)) {
      return finish_local(reason::invalid_message,
                          std::string("request is not a valid ") + std::string(rpc_name(rpc_)) + " message");
    }
    has_first_message_ = has_message;
    if (auto no = execution_.admit(fx_, rpc_, fields_, identity_.tenant, request_id_,
                                   [this] { return first_asks_reattachable(); }))
      return finish_local(no->reason, no->message, no->retry_after);
    key_ = actors::session_key{identity_.tenant, fields_.user_id, fields_.session_id}.str();
    route_by_tables(false);
  }

  /// The backend from the tables, else the router's (`op_asked`: the cluster
  /// was asked for the call's operation id and knew nothing).
  /// `unsettled`: the router's refusal for an operation id nobody knew while
  /// the cluster settles; it ends the call only if its session is unknown here
  /// too (placing it would pick a backend the operation is likely not on).
  void route_by_tables(bool op_asked, const actors::route_result* unsettled = nullptr) {
    table_lookup table{fx_, fields_.operation_id, key_, core::now_ms()};
    const auto d = choose_backend(rpc_, fields_, fx_.backends.size(), fx_.rebind_lost, table, op_asked);
    const bool new_here = d.action == route_action::resolve || d.action == route_action::resolve_held;
    if (unsettled && new_here) return finish_local(unsettled->refusal, unsettled->error);
    switch (d.action) {
      case route_action::use: return start_upstream(d.backend);
      case route_action::any:
        if (auto b = any_backend()) return start_upstream(*b);
        return finish_local(reason::no_backend, "scg: tenant " + identity_.tenant.substr(0, 64) +
                                                    "'s pool (tenants.pools) names no configured backend");
      case route_action::resolve_op: return fx_.router->find_operation(fields_.operation_id, key_, op_answer_on_worker());
      case route_action::resolve: return fx_.router->resolve(key_, answer_on_worker());
      case route_action::resolve_held:
        return fx_.router->resolve_held(key_, fields_.session_id, spark_user_, fields_.observed_server_session,
                                        answer_on_worker());
      case route_action::rebind: return fx_.router->rebind(key_, answer_on_worker());
      case route_action::refuse: return refuse_route(d);
    }
  }

  /// A router callback that continues this call on its worker.
  /// The wait, from the ask to the answer here, is scg_router_decision_seconds.
  std::function<void(actors::route_result)> answer_on_worker() {
    return [self = shared_from_this(), asked = std::chrono::steady_clock::now()](actors::route_result r) {
      auto& w = self->w_;
      w.post([self, asked, r = std::move(r)] {
        auto& m = core::global_metrics();
        const auto waited = std::chrono::steady_clock::now() - asked;
        m.router_decision.observe(m.decision_bounds_us, static_cast<std::uint64_t>(
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

  /// choose_backend refused: no backend at all, or the session's is lost
  /// (on_backend_lost.action: fail) and the status names it.
  void refuse_route(const route_decision& d) {
    if (d.refusal != reason::backend_lost) return finish_local(d.refusal, "scg: no backends are configured");
    const auto& lost = *fx_.backends[d.backend];
    finish_local(reason::backend_lost, "scg: the session's backend " + lost.name + " (" + lost.address +
                                           ") was lost; start a new session (on_backend_lost.action: fail)");
  }

  /// The router's answer for a new or rebound session.
  void on_route(const actors::route_result& r) {
    if (finished()) return;
    if (!r.backend) return finish_local(r.refusal, r.error, std::chrono::milliseconds(r.retry_after_ms));
    log_.debug("session_bound request_id={} rpc={} backend={}", request_id_, rpc_name(rpc_),
               fx_.backends[*r.backend]->name);
    start_upstream(*r.backend);
  }

  /// A call without a session: the next eligible backend its tenant may use
  /// (tenants.pools), round robin; failing that, one of them anyway (it
  /// answers for itself); nullopt when the pool names no configured backend.
  std::optional<backend_index> any_backend() {
    const auto n = fx_.backends.size();
    auto it = fx_.pools.find(identity_.tenant);
    const auto* pool = it == fx_.pools.end() ? nullptr : &it->second;
    auto start = fx_.cursor.fetch_add(1, std::memory_order_relaxed);
    std::optional<backend_index> fallback;
    for (std::size_t k = 0; k < n; ++k) {
      const auto i = static_cast<backend_index>((start + k) % n);
      if (!actors::in_pool(pool, fx_.backends[i]->name)) continue;
      if (actors::eligible(*fx_.backends[i])) return i;
      if (!fallback) fallback = i;
    }
    return fallback;
  }

  // --- the backend stream ------------------------------------------------------------

  void start_upstream(backend_index b) {
    if (finished()) return;
    if (fx_.backends.empty()) return finish_local(reason::no_backend, "scg: no backends are configured");
    phase_ = phase::connecting;
    backend_index_ = b;
    backend_ = fx_.backends[b];
    if (rpc_ == rpc::execute_plan && !fields_.operation_id.empty()) learn_operation(fields_.operation_id);

    // The backend's headers refer to the call's strings and these locals:
    // nghttp2 copies them when the stream is submitted, below.
    const std::string traceparent = span_.started() ? core::format_traceparent(span_.trace()) : std::string();
    const auto& token = fx_.backend_tokens.for_tenant(identity_.tenant);
    const std::string authorization = token.empty() ? std::string() : "Bearer " + token;
    std::vector<h2::header_ref> headers;
    headers.reserve(metadata_.size() + 8);
    headers.push_back({":method", "POST"});
    headers.push_back({":scheme", "http"});
    headers.push_back({":path", method_});
    headers.push_back({":authority", backend_->address});
    headers.push_back({"te", "trailers"});
    headers.push_back({"content-type", content_type_});
    for (const auto& h : metadata_)
      if (!not_forwarded(h.name) && !(span_.started() && h.name == "traceparent")) headers.push_back({h.name, h.value});
    headers.push_back({"x-request-id", request_id_});
    if (span_.started()) headers.push_back({"traceparent", traceparent});  // scg's span is the parent
    if (!authorization.empty()) headers.push_back({"authorization", authorization});
    auto deadline = deadline_;
    if (is_execution(rpc_) && !execution_.waits()) {
      // An execution longer than its tenant may run is cut here, then interrupted
      // (one that waits rather than computes is exempt: net/admission.hpp).
      if (auto secs = fx_.limits.for_tenant(identity_.tenant).max_execution_secs; secs > 0) {
        // Counted from the operation's start (a reattach continues it).
        const auto since_start =
            std::chrono::milliseconds(std::max<std::int64_t>(0, core::now_ms() - execution_.started_ms()));
        const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(secs) - since_start;
        if (!deadline || limit < *deadline) {
          execution_limit_ = limit;
          deadline = limit;
          arm_timer(limit);
        }
      }
    }
    // The backend gets a second more than an execution's limit: scg's timer
    // cuts it first, and says why.
    const std::string timeout =
        deadline ? h2::format_timeout(*deadline - std::chrono::steady_clock::now() +
                                      (execution_limit_ ? std::chrono::seconds(1) : std::chrono::seconds(0)))
                 : std::string();
    if (deadline) headers.push_back({"grpc-timeout", timeout});

    up_ = w_.upstream(b, backend_->address, fx_.limits.connect_timeout_ms);
    to_client_.producer = up_;
    if (has_first_message_) send_held(std::move(first_));
    for (auto& m : waiting_) send_held(std::move(m));
    waiting_.clear();
    to_backend_.ended = request_ended_;
    backend_->in_flight.fetch_add(1, std::memory_order_relaxed);
    backend_->calls_total.fetch_add(1, std::memory_order_relaxed);
    upstream_started_ = std::chrono::steady_clock::now();
    if (!is_unary(rpc_) || !has_first_message_) {
      counted_stream_ = true;
      core::global_metrics().forward_active_streams.fetch_add(1, std::memory_order_relaxed);
    }
    log_.debug("forward request_id={} rpc={} backend={}", request_id_, rpc_name(rpc_), backend_->name);
    const auto id = up_->submit_request(headers, to_backend_, shared_from_this());
    if (id <= 0) {
      backend_->in_flight.fetch_sub(1, std::memory_order_relaxed);
      return on_client_stream_closed(NGHTTP2_INTERNAL_ERROR, std::string("cannot open a stream: ") + nghttp2_strerror(id));
    }
    up_stream_ = id;
    to_client_.producer_stream = id;
  }

  /// Stops the backend stream (the client is gone, or scg answered).
  void cancel_backend() {
    if (up_ && up_stream_ > 0 && !up_closed_) up_->reset(up_stream_, NGHTTP2_CANCEL);
  }

  // --- learning from the conversation -------------------------------------------------

  void learn_operation(const std::string& op_id) {
    operation_id_ = op_id;
    execution_.adopt(fx_, rpc_, op_id, identity_.tenant);
    // Its start goes with it to every replica (max_execution_secs counts from it).
    const auto started = execution_.started_ms() > 0 ? core::wall_of(execution_.started_ms()) : 0;
    fx_.table->add_op(op_id, backend_index_, key_, core::now_ms(), started);
    core::bump(core::global_metrics().router_operations_learned_total);
    fx_.router->operation_started(key_, op_id);
  }

  /// Sees ExecutePlanResponse.result_complete: the operation's last response.
  void note_result_complete(const held_message& msg) {
    if (msg.header.length > small_response_bytes) return;
    response_fields f;
    if (!msg.header.compressed) {
      execution_.set_result_complete(scan_response(rpc_, msg.body(), f) && f.result_complete);
      return;
    }
    auto body = readable_body(msg, response_encoding_);
    execution_.set_result_complete(
        body && scan_response(rpc_, {{reinterpret_cast<const std::uint8_t*>(body->data()), body->size()}}, f) &&
        f.result_complete);
  }

  void learn_from_first_response(const held_message& msg) {
    if (learned_first_ || (rpc_ != rpc::execute_plan && rpc_ != rpc::clone_session)) return;
    learned_first_ = true;
    response_fields f;
    auto ok = [&] {
      if (!msg.header.compressed) return bool(scan_response(rpc_, msg.body(), f));
      auto body = readable_body(msg, response_encoding_);
      if (!body) return false;
      return bool(scan_response(rpc_, {{reinterpret_cast<const std::uint8_t*>(body->data()), body->size()}}, f));
    }();
    if (!ok) return;  // passed on as is
    if (rpc_ == rpc::execute_plan && fields_.operation_id.empty() && !f.operation_id.empty())
      learn_operation(f.operation_id);
    if (rpc_ == rpc::clone_session) {
      const auto& id = !f.new_session_id.empty() ? f.new_session_id : fields_.new_session_id;
      if (!id.empty()) {
        // The answer waits for the binding (response_message_end holds it).
        clone_pending_ = true;
        fx_.router->bind_clone(actors::session_key{identity_.tenant, fields_.user_id, id}.str(), backend_index_,
                               [self = shared_from_this()](actors::route_result) {
                                 self->w_.post([self] { self->on_clone_bound(); });
                               });
      }
    }
  }

  void learn_from_success() {
    if (rpc_ == rpc::release_session && !fields_.session_id.empty()) {
      fx_.router->session_released(key_);
    } else if (rpc_ == rpc::release_execute && fields_.release_all) {
      fx_.executions.finish(fields_.operation_id);
      if (!fx_.table->erase_op(fields_.operation_id)) return;
      core::bump(core::global_metrics().router_operations_released_total);
      fx_.router->operation_released(key_, fields_.operation_id);
    }
  }

  // --- security and overload ----------------------------------------------------------

  std::optional<std::string_view> find_header(std::string_view key) const {
    for (const auto& h : metadata_)
      if (h.name == key) return std::string_view(h.value);
    return std::nullopt;
  }

  /// Checks the caller's credential and resolves the tenant; refuses the
  /// call (UNAUTHENTICATED, with a reason that leaks nothing) when it fails.
  void authenticate() {
    if (!fx_.auth) return;
    auto r = fx_.auth->authenticate(find_header("authorization"),
                                    [this](std::string_view key) { return find_header(key); });
    if (auto* fail = std::get_if<auth::failure>(&r)) {
      core::audit("auth.failure", {{"rpc", rpc_name(rpc_)}, {"reason", fail->reason}, {"request_id", request_id_},
                                   {"peer", down_->peer()}});
      return finish_local(reason::unauthenticated, "scg: " + fail->reason);
    }
    identity_ = std::get<auth::identity>(std::move(r));
  }

  /// Puts the verified user into a request message; false when it is not
  /// valid protobuf.
  bool rewrite_user(held_message& msg) {
    auto body = readable_body(msg, request_encoding_);
    if (!body) return false;
    auto rewritten = auth::rewrite_user_id(*body, spark_user_);
    if (!rewritten) return false;
    msg = message_of(*rewritten, msg);
    return true;
  }

  /// The first message (an ExecutePlan) asks for a reattachable execution;
  /// true without a message.
  bool first_asks_reattachable() {
    if (!has_first_message_) return true;
    auto body = readable_body(first_, request_encoding_);
    return body && asks_reattachable(*body);
  }

  /// The deadline or the execution limit came (whichever is first).
  void arm_timer(std::chrono::steady_clock::time_point at) {
    if (!deadline_ || at < *deadline_) deadline_ = at;
    if (!timer_) timer_ = std::make_unique<asio::steady_timer>(w_.io());
    timer_->expires_at(*deadline_);
    timer_->async_wait([weak = weak_from_this()](const asio::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->finished()) return;
      if (self->execution_limit_ && std::chrono::steady_clock::now() >= *self->execution_limit_) {
        self->kill_execution();
      } else {
        self->finish_local(reason::deadline, "Deadline Exceeded");
      }
      self->w_.flush_dirty();
    });
  }

  /// The execution outlived max_execution_secs: the backend is told to stop
  /// it, the client why its stream ended (RESOURCE_EXHAUSTED without
  /// RetryInfo: no client retries or reattaches it; a reattach is told the same).
  void kill_execution() {
    const auto& op = !operation_id_.empty() ? operation_id_ : fields_.operation_id;
    if (!op.empty())
      send_interrupt(*backend_, fields_.session_id, spark_user_, op, fx_.backend_tokens.for_tenant(identity_.tenant),
                     request_id_);
    execution_.kill(fx_);
    core::audit("execution.killed", {{"tenant", identity_.tenant}, {"user", fields_.user_id},
                                     {"session", fields_.session_id}, {"operation", op},
                                     {"backend", backend_->name}, {"request_id", request_id_}});
    finish_local(reason::execution_too_long, killed_message(fx_, identity_.tenant, op));
  }

  /// Hides the backend's token when a server echoes it in Config (it does
  /// when the token was given in SparkConf): under its key, what get_all(prefix)
  /// leaves of its key, or any key whose value is a token scg holds.
  void redact_config(held_message& msg) {
    auto body = readable_body(msg, response_encoding_);
    if (!body) return;
    const auto secrets = fx_.backend_tokens.all();
    const bool suspect = body->find("token") != std::string::npos ||
                         std::any_of(secrets.begin(), secrets.end(), [&](const std::string& t) {
                           return !t.empty() && body->find(t) != std::string::npos;
                         });
    if (!suspect) return;
    std::string redacted;
    if (auth::redact_config_response(*body, redacted, secrets) != auth::redact_outcome::redacted) return;
    msg = message_of(redacted, msg);
    core::bump(core::global_metrics().config_redactions_total);
  }

  // --- accounting ----------------------------------------------------------------------

  /// What the call cost its tenant and user (core/usage.hpp), once, at its end.
  void account() {
    core::call_usage u;
    u.method = rpc_;
    u.rejection = rejection_;
    const bool reached = backend_ && up_stream_ > 0;
    u.execution = reached && rpc_ == rpc::execute_plan;
    if (reached && is_execution(rpc_))
      u.execution_ms = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      std::chrono::steady_clock::now() - upstream_started_)
                                                      .count());
    u.result_bytes = result_bytes_;
    u.result_rows = result_rows_;
    fx_.usage->record_call(identity_.tenant, fields_.user_id, u, core::wall_now_ms());
  }

  // --- finishing -----------------------------------------------------------------------

  bool finished() const { return phase_ == phase::finished; }

  /// The call's status is `code`: the one way into phase::finished.
  void conclude(int code) {
    phase_ = phase::finished;
    final_code_ = code;
  }

  /// The backend's status ends the call; scg replaces it only to say what
  /// scg did (an execution it cut, a stream message it refused).
  void finish_with_backend_status(h2::header_list& status, bool trailers_only) {
    if (clone_pending_ && !trailers_only) {  // after the held answer (on_clone_bound)
      pending_status_ = std::move(status);
      phase_ = phase::finishing;
      return;
    }
    const h2::header* grpc_status = nullptr;
    for (const auto& h : status)
      if (h.name == "grpc-status") grpc_status = &h;
    if (!grpc_status) return finish_without_status();
    const auto parsed = core::parse_grpc_status(grpc_status->value);
    if (!parsed)
      return finish_local(reason::backend_bad_status, "scg: backend " + backend_->name + " sent grpc-status \"" +
                                                          grpc_status->value.substr(0, 32) + "\", not a status code");
    const int code = *parsed;
    if (code == core::grpc_code::deadline_exceeded && execution_limit_ &&
        std::chrono::steady_clock::now() >= *execution_limit_)
      return kill_execution();
    if (code == 0) learn_from_success();
    log_.debug("done request_id={} rpc={} backend={} code={}", request_id_, rpc_name(rpc_), backend_->name,
               core::status_code_name(code));
    conclude(code);
    if (trailers_only) {
      down_->submit_response(down_stream_, status, nullptr);
      to_client_.drop();
      return;
    }
    to_client_.trailers = std::move(status);
    to_client_.ended = true;
    down_->resume(down_stream_);
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
    const auto& row = core::reply_of(why);
    int code = row.code;
    std::string details;
    if (row.retry_later) {
      if (fx_.limits.retry_unavailable) code = core::grpc_code::unavailable;  // limits.retry_status
      details = core::retry_status_details(code, message,
                                           retry_after.count() > 0 ? retry_after : std::chrono::milliseconds(1000));
    }
    core::count_local_reply(why);
    rejection_ = why;
    log_reply(row, code, message);
    conclude(code);
    cancel_backend();
    to_backend_.drop();
    if (!keep_queued) to_client_.drop();
    h2::header_list status;
    if (!response_started_) {
      status.push_back({":status", "200"});
      status.push_back({"content-type", "application/grpc"});
    }
    status.push_back({"grpc-status", std::to_string(code)});
    if (!message.empty()) status.push_back({"grpc-message", h2::percent_encode(message)});
    if (!details.empty()) status.push_back({"grpc-status-details-bin", h2::base64_encode(details)});
    if (down_closed_) return;
    if (!response_started_) {
      down_->submit_response(down_stream_, status, nullptr);
      return;
    }
    to_client_.trailers = std::move(status);
    to_client_.ended = true;
    down_->resume(down_stream_);
  }

  /// One line per local answer, named by its reason; info and warn lines at
  /// most once per reason per 10 s (a flood says how many it held back).
  void log_reply(const core::local_reply& row, int code, const std::string& message) {
    static std::array<core::log_throttle, core::local_reason_count> throttles;
    const auto level = row.level == core::reply_level::debug  ? spdlog::level::debug
                       : row.level == core::reply_level::info ? spdlog::level::info
                                                              : spdlog::level::warn;
    if (!log_.should_log(level)) return;
    std::int64_t held = 0;
    if (level != spdlog::level::debug && (held = throttles[static_cast<std::size_t>(row.reason)].pass()) < 0) return;
    log_.log(level, "{} request_id={} rpc={} backend={} peer={} code={} suppressed={} message=\"{}\"", row.name,
             request_id_, rpc_name(rpc_), backend_ ? backend_->name : std::string("-"), down_->peer(),
             core::status_code_name(code), held, message);
  }

  /// The backend's stream ended, its trailers (if any) without grpc-status.
  void finish_without_status() {
    finish_local(reason::backend_no_status, "scg: backend " + backend_->name + " ended the stream without a gRPC status");
  }

 public:
  /// Cancels the call at the shutdown deadline.
  void abandon(const std::string& why) {
    finish_local(reason::shutting_down, why);
  }

 private:
  forward_context& fx_;
  h2::worker& w_;
  std::shared_ptr<h2::downstream_connection> down_;
  const std::int32_t down_stream_;
  std::shared_ptr<h2::upstream_connection> up_;
  std::int32_t up_stream_ = 0;
  spdlog::logger& log_;
  const std::chrono::steady_clock::time_point started_;
  std::shared_ptr<actors::backend_state> backend_;

  // the request as it came
  h2::header_list metadata_;
  std::string method_, content_type_, request_encoding_, response_encoding_;
  std::optional<std::chrono::nanoseconds> timeout_;
  bool bad_method_ = false;
  std::size_t header_limit_hit_ = 0;  // the header block passed this many bytes: the rest was dropped

  // the two directions
  h2::pipe to_backend_, to_client_;
  h2::message_splitter request_split_, response_split_;
  held_message request_, response_, first_;
  h2::slice_queue request_prefix_, response_prefix_;  // a message's prefix until its length was checked
  std::vector<held_message> waiting_;  // messages that came while routing
  bool in_request_ = false, hold_request_ = false, in_response_ = false, hold_response_ = false;
  h2::header_list response_headers_, backend_trailers_;

  // progress
  phase phase_ = phase::receiving;
  bool has_first_message_ = false;  // route() had a message to read (not only the request's end)
  bool request_ended_ = false;      // the client half-closed its stream (END_STREAM)
  bool response_started_ = false;   // the client has its response headers: what scg adds is trailers
  bool down_closed_ = false, up_closed_ = false;  // the client's stream, the backend's, closed
  bool counted_stream_ = false;     // counted in active streams
  std::optional<std::chrono::steady_clock::time_point> deadline_, execution_limit_;
  std::unique_ptr<asio::steady_timer> timer_;

  rpc rpc_ = rpc::unknown;
  std::string request_id_;
  std::string key_;
  request_fields fields_;
  backend_index backend_index_ = 0;
  int final_code_ = 0;
  auth::identity identity_{"", "", false};  // who calls, for which tenant
  std::string spark_user_;                  // the user id Spark sees (auth::spark_user_id)
  bool rewrite_users_ = false;              // requests carry spark_user_ instead of their own
  std::string operation_id_;                // the execution's id, once known
  execution_claim execution_;               // its part in the tenant's executions (net/admission.hpp)
  bool learned_first_ = false;
  bool clone_pending_ = false;                   // CloneSession's answer waits for its binding
  held_message clone_answer_;
  std::optional<h2::header_list> pending_status_;  // the backend's status, after clone_answer_
  call_span span_;  // started only when tracing

  // accounting (account())
  std::optional<reason> rejection_;  // why scg answered the call itself
  std::chrono::steady_clock::time_point upstream_started_{};
  std::uint64_t result_bytes_ = 0, result_rows_ = 0;
  bool counting_rows_ = false;       // the current response is read for its row_count
  arrow_rows_reader rows_reader_;
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
