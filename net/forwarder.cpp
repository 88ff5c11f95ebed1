// The flow of one RPC through scg, start to end:
//
//   1. a client call arrives on the generic service (any method); its bearer
//      token is checked and its tenant resolved (auth/authenticator.hpp);
//   2. the first request message is read and its routing fields scanned
//      (net/wire.hpp) — plans are never parsed; the verified user replaces
//      user_context.user_id; rate limits and the tenant's bulkheads apply;
//   3. the backend is found: operation index first for Reattach/Release/
//      Interrupt, then the session table; a brand-new session asks the
//      router actor (which, in a cluster, asks the key's owner replica) and
//      is answered through a callback (no thread blocks); a session whose
//      backend is lost is rebound or refused (on_backend_lost);
//   4. a generic call to that backend starts with the client's metadata
//      (its authorization replaced by scg's backend token), deadline and an
//      x-request-id (with `tracing:`, a traceparent naming scg's span: core/tracing.hpp);
//   5. messages are pumped both ways, one read and one write in flight per
//      direction, so a slow reader slows its producer instead of buffering;
//   6. operation ids and cloned sessions are learned from responses;
//   7. the backend's headers, trailers and status (with details) go back to
//      the client unchanged (a Config response has the backend's own token
//      redacted); an execution past its tenant's max_execution_secs is
//      interrupted on the backend and ends DEADLINE_EXCEEDED.
#include "net/forwarder.hpp"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <string_view>

#include "auth/authenticator.hpp"
#include "auth/protowire.hpp"
#include "auth/rate_limit.hpp"
#include "auth/rewrite.hpp"
#include "core/audit.hpp"
#include "core/ids.hpp"
#include "core/metrics.hpp"
#include "core/tracing.hpp"
#include "net/wire.hpp"

namespace scg::net {

namespace {

using actors::backend_index;

/// Request headers that describe one HTTP/2 hop or that gRPC sets itself.
bool hop_by_hop(std::string_view key) {
  static constexpr std::string_view dropped[] = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
      "host", "content-type", "user-agent", "grpc-timeout", "grpc-encoding",
      "grpc-accept-encoding", "x-request-id",
      "authorization"};  // the client's credential is for scg, never for the backend
  if (!key.empty() && key[0] == ':') return true;
  for (auto d : dropped)
    if (key == d) return true;
  return false;
}

/// Response headers that gRPC writes itself on the client-facing side.
bool transport_header(std::string_view key) {
  return key == "content-type" || key == "grpc-encoding" || key == "grpc-accept-encoding" ||
         key == "grpc-status" || key == "grpc-message" || key == "grpc-status-details-bin" ||
         (!key.empty() && key[0] == ':');
}

std::string_view view(grpc::string_ref s) { return {s.data(), s.size()}; }

/// The "forward" logger, looked up once (the registry takes a lock).
spdlog::logger& forward_log() {
  static const std::shared_ptr<spdlog::logger> log = spdlog::get("forward");
  return *log;
}

/// The slices of `buf` as scanner segments; `keep` holds the slice references.
segments segments_of(const grpc::ByteBuffer& buf, std::vector<grpc::Slice>& keep) {
  keep.clear();
  segments out;
  if (!buf.Dump(&keep).ok()) return out;
  out.reserve(keep.size());
  for (const auto& s : keep) out.push_back({s.begin(), s.size()});
  return out;
}

/// The bytes of `buf` in one string (only for the messages scg edits).
std::string flatten(const grpc::ByteBuffer& buf) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buf.Dump(&slices).ok()) return out;
  out.reserve(buf.Length());
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

/// True when `key` occurs in `buf` (a match across two slices counts too:
/// then the bytes are joined to look).
bool mentions(const grpc::ByteBuffer& buf, std::string_view key) {
  std::vector<grpc::Slice> slices;
  if (!buf.Dump(&slices).ok()) return false;
  if (slices.size() > 1) return flatten(buf).find(key) != std::string::npos;
  for (const auto& s : slices)
    if (std::string_view(reinterpret_cast<const char*>(s.begin()), s.size()).find(key) != std::string_view::npos)
      return true;
  return false;
}

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

/// Executions: the streams a tenant's bulkhead counts and times.
bool is_execution(rpc r) { return r == rpc::execute_plan || r == rpc::reattach_execute; }

/// Tells `backend` to interrupt operation `op_id` (InterruptRequest with
/// interrupt_type OPERATION_ID), fire and forget: the answer is only logged.
void send_interrupt(actors::backend_state& backend, const std::string& session, const std::string& user,
                    const std::string& op_id, const std::string& token, const std::string& request_id) {
  namespace pw = auth::protowire;
  struct call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  std::string user_context, body;
  pw::put_bytes(user_context, 1, user);
  pw::put_bytes(body, 1, session);
  pw::put_bytes(body, 2, user_context);
  pw::put_uint(body, 4, 3);  // INTERRUPT_TYPE_OPERATION_ID
  pw::put_bytes(body, 6, op_id);
  auto* c = new call;
  c->request = buffer_of(body);
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c->ctx.AddMetadata("x-request-id", request_id);
  if (!token.empty()) c->ctx.AddMetadata("authorization", "Bearer " + token);
  backend.stub->UnaryCall(&c->ctx, std::string(service_prefix) + "Interrupt", grpc::StubOptions(), &c->request,
                          &c->response, [c, op_id, name = backend.name](grpc::Status s) {
                            if (!s.ok())
                              forward_log().warn("interrupt_failed backend={} operation_id={} code={} reason=\"{}\"",
                                                 name, op_id, core::status_code_name(s.error_code()),
                                                 s.error_message());
                            delete c;
                          });
}

/// RPCs whose request is one message: sent with WriteLast, no further reads.
bool single_request(rpc r) { return r != rpc::add_artifacts && r != rpc::unknown; }

/// RPCs routed by operation id before session id.
bool follows_operation(rpc r, const request_fields& f) {
  if (f.operation_id.empty()) return false;
  return r == rpc::reattach_execute || r == rpc::release_execute ||
         (r == rpc::interrupt && f.interrupt_type == 3);
}

class forward_call final : public grpc::ServerGenericBidiReactor {
 public:
  forward_call(forward_context& fx, grpc::GenericCallbackServerContext* ctx)
      : fx_(fx), ctx_(ctx), upstream_(*this), log_(forward_log()), started_(std::chrono::steady_clock::now()) {
    core::global_metrics().forward_active_calls.fetch_add(1, std::memory_order_relaxed);
    const std::string& method = ctx_->method();
    rpc_ = rpc_from_path(method);
    auto& md = ctx_->client_metadata();
    auto rid = md.find("x-request-id");
    request_id_ = rid != md.end() ? std::string(view(rid->second)) : core::new_request_id();
    if (fx_.tracer) start_span(md);
    if (method.compare(0, service_prefix.size(), service_prefix) != 0) {
      core::bump(core::global_metrics().forward_unimplemented_total);
      log_.debug("unimplemented request_id={} method={}", request_id_, method);
      finish_local(grpc::StatusCode::UNIMPLEMENTED,
                   "scg forwards only " + std::string(service_prefix) + "* methods, not " + method);
      return;
    }
    if (!authenticate(md)) return;
    StartRead(&request_);
  }

  // --- client side (server reactor) -----------------------------------------
  // Upstream operations started from here run under a hold on the backend
  // call (see start_stream), so the backend side cannot end underneath them.

  void OnReadDone(bool ok) override {
    if (!routed_) return route_first_message(ok);
    if (!ok) {  // client half-closed (or went away): no more writes
      upstream_.StartWritesDone();
      return upstream_.RemoveHold();
    }
    core::bump(core::global_metrics().forward_request_bytes_total, request_.Length());
    // Every message of a stream (AddArtifacts) carries the verified user.
    if (identity_.verified && !rewrite_user(request_)) {
      upstream_.StartWritesDone();  // the backend call ends; the client gets the error below
      bad_stream_message_ = true;
      client_ctx_.TryCancel();
      return upstream_.RemoveHold();
    }
    upstream_.StartWrite(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish_now;
    int write = -1, read = -1;
    bool end_flow = false;
    {
      std::lock_guard lock{mu_};
      client_writing_ = false;
      if (finish_pending_) {  // the backend is done: finish, whatever became of this write
        finish_now = std::exchange(finish_pending_, std::nullopt);
      } else if (!ok) {
        parked_ = false;
        client_gone_ = true;
        end_flow = end_response_flow_locked();
      } else if (parked_) {
        parked_ = false;
        write = take_read_slot_locked();
        read = read_slot_;
      }
    }
    if (finish_now) return finish(*finish_now);
    if (!ok) client_ctx_.TryCancel();  // the client is gone: stop the backend
    if (end_flow) upstream_.RemoveHold();
    if (write >= 0) StartWrite(&response_[write]);
    if (read >= 0) upstream_.StartRead(&response_[read]);
  }

  void OnSendInitialMetadataDone(bool ok) override {
    if (ok) return start_backend_read();
    bool end_flow;
    {
      std::lock_guard lock{mu_};
      client_gone_ = true;
      end_flow = end_response_flow_locked();
    }
    client_ctx_.TryCancel();
    if (end_flow) upstream_.RemoveHold();
  }

  void OnCancel() override {
    bool started;
    {
      std::lock_guard lock{mu_};
      cancelled_ = true;
      started = upstream_started_;
    }
    if (started) client_ctx_.TryCancel();
  }

  void OnDone() override {
    if (holds_execution_slot_) fx_.executions.give_back(identity_.tenant);
    if (final_code_ != 0 && final_code_ != static_cast<int>(grpc::StatusCode::CANCELLED))
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
    if (streaming_) core::global_metrics().forward_active_streams.fetch_sub(1, std::memory_order_relaxed);
    if (fx_.tracer) end_span();
    release();
  }

 private:
  /// The backend side of a streaming call.
  class upstream_reactor final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit upstream_reactor(forward_call& call) : call_(call) {}
    void OnReadInitialMetadataDone(bool ok) override { call_.on_backend_headers(ok); }
    void OnReadDone(bool ok) override { call_.on_backend_message(ok); }
    void OnWriteDone(bool ok) override { call_.on_backend_write_done(ok); }
    void OnDone(const grpc::Status& status) override { call_.on_backend_done(status); }

   private:
    forward_call& call_;
  };

  // --- routing ---------------------------------------------------------------

  void route_first_message(bool ok) {
    routed_ = true;
    has_first_message_ = ok;
    if (ok) {
      auto scan = scan_request(rpc_, segments_of(request_, slices_), fields_);
      if (!scan) {
        core::bump(core::global_metrics().forward_invalid_argument_total);
        log_.debug("invalid_argument request_id={} rpc={} reason=\"{}\"", request_id_, rpc_name(rpc_),
                   scan.reason);
        return finish_local(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string("request is not a valid ") +
                                std::string(rpc_name(rpc_)) + " message: " + scan.reason);
      }
    }
    if (identity_.verified) {
      fields_.user_id = identity_.user_id;
      if (has_first_message_ && !rewrite_user(request_))
        return finish_local(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string("request is not a valid ") + std::string(rpc_name(rpc_)) + " message");
    }
    if (!admit()) return;
    key_ = actors::session_key{identity_.tenant, fields_.user_id, fields_.session_id}.str();
    const auto now = actors::now_ms();
    if (follows_operation(rpc_, fields_)) {
      // An operation on a lost backend died with it: route by session, and
      // the new server answers OPERATION_NOT_FOUND, so the client re-runs it.
      if (auto op = fx_.table->find_op(fields_.operation_id, now);
          op && !actors::lost(*fx_.backends[op->backend], now, fx_.lost_after_ms))
        return start_upstream(op->backend);
    }
    if (fields_.session_id.empty() || fx_.backends.empty()) {
      // Nothing to keep affinity for (no message, or an rpc without a
      // session): spread over reachable backends; the backend answers.
      return start_upstream(any_backend());
    }
    if (auto b = fx_.table->find_session(key_, now)) {
      if (!actors::lost(*fx_.backends[*b], now, fx_.lost_after_ms)) return start_upstream(*b);
      return on_lost_backend(*b);
    }
    fx_.router->resolve(key_, [this](actors::route_result r) { on_route(r); });
  }

  /// The session's backend has been down for on_backend_lost.after_secs:
  /// move the session (the new server tells 4.0+ clients SESSION_CHANGED,
  /// as Spark does) or refuse with a status that names the backend.
  void on_lost_backend(backend_index b) {
    const auto& lost = *fx_.backends[b];
    if (!fx_.rebind_lost) {
      core::bump(core::global_metrics().forward_backend_lost_total);
      log_.info("backend_lost request_id={} rpc={} backend={}", request_id_, rpc_name(rpc_), lost.name);
      return finish_local(grpc::StatusCode::FAILED_PRECONDITION,
                          "scg: the session's backend " + lost.name + " (" + lost.address +
                              ") was lost; start a new session (on_backend_lost.action: fail)");
    }
    fx_.router->rebind(key_, [this](actors::route_result r) { on_route(r); });
  }

  /// The router's answer for a new or rebound session (on an actor thread).
  void on_route(const actors::route_result& r) {
    if (!r.backend) {
      log_.info("no_backend request_id={} rpc={} reason=\"{}\"", request_id_, rpc_name(rpc_), r.error);
      if (r.retry_after_ms > 0)
        return finish_retry_later(static_cast<grpc::StatusCode>(r.code), r.error,
                                  std::chrono::milliseconds(r.retry_after_ms));
      return finish_local(static_cast<grpc::StatusCode>(r.code), r.error);
    }
    log_.debug("session_bound request_id={} rpc={} backend={}", request_id_, rpc_name(rpc_),
               fx_.backends[*r.backend]->name);
    start_upstream(*r.backend);
  }

  backend_index any_backend() {
    const auto n = fx_.backends.size();
    if (n == 0) return 0;
    auto start = fx_.cursor.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t k = 0; k < n; ++k) {
      auto i = (start + k) % n;
      if (actors::eligible(*fx_.backends[i])) return static_cast<backend_index>(i);
    }
    return static_cast<backend_index>(start % n);
  }

  // --- the backend call --------------------------------------------------------

  void start_upstream(backend_index b) {
    if (fx_.backends.empty())
      return finish_local(grpc::StatusCode::UNAVAILABLE, "scg: no backends are configured");
    backend_index_ = b;
    backend_ = fx_.backends[b];
    if (rpc_ == rpc::execute_plan && !fields_.operation_id.empty()) learn_operation(fields_.operation_id);

    for (const auto& [k, v] : ctx_->client_metadata()) {
      if (!hop_by_hop(view(k)) && !(trace_ && view(k) == "traceparent"))
        client_ctx_.AddMetadata(std::string(view(k)), std::string(view(v)));
    }
    client_ctx_.AddMetadata("x-request-id", request_id_);
    if (trace_) client_ctx_.AddMetadata("traceparent", core::format_traceparent(*trace_));  // scg's span is the parent
    if (const auto& token = fx_.backend_tokens.for_tenant(identity_.tenant); !token.empty())
      client_ctx_.AddMetadata("authorization", "Bearer " + token);
    auto deadline = ctx_->deadline();
    if (is_execution(rpc_)) {
      // An execution longer than its tenant may run is cut here, then interrupted.
      if (auto secs = fx_.limits.for_tenant(identity_.tenant).max_execution_secs; secs > 0) {
        execution_limit_ = std::chrono::system_clock::now() + std::chrono::seconds(secs);
        if (*execution_limit_ < deadline) deadline = *execution_limit_;
        else execution_limit_.reset();  // the client's own deadline comes first
      }
    }
    if (deadline != std::chrono::system_clock::time_point::max()) client_ctx_.set_deadline(deadline);

    {
      std::lock_guard lock{mu_};
      upstream_started_ = !cancelled_;
    }
    if (!upstream_started_) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    refs_.fetch_add(1, std::memory_order_relaxed);
    backend_->in_flight.fetch_add(1, std::memory_order_relaxed);
    backend_->calls_total.fetch_add(1, std::memory_order_relaxed);
    log_.debug("forward request_id={} rpc={} backend={}", request_id_, rpc_name(rpc_), backend_->name);
    if (has_first_message_)
      core::bump(core::global_metrics().forward_request_bytes_total, request_.Length());

    if (is_unary(rpc_) && has_first_message_)
      start_unary();
    else
      start_stream();
  }

  /// Unary RPCs: one backend call batch and one write-and-finish to the
  /// client, about a third of the operations of the streaming path.
  void start_unary() {
    unary_ = true;
    backend_->stub->UnaryCall(&client_ctx_, ctx_->method(), grpc::StubOptions(), &request_,
                              &response_[0], [this](grpc::Status status) {
                                pass_headers();
                                if (status.ok()) learn_from_first_response(response_[0]);
                                if (status.ok() && rpc_ == rpc::config) redact_config();
                                on_backend_done(status);
                              });
  }

  void start_stream() {
    streaming_ = true;
    core::global_metrics().forward_active_streams.fetch_add(1, std::memory_order_relaxed);
    backend_->stub->PrepareBidiStreamingCall(&client_ctx_, ctx_->method(), grpc::StubOptions(),
                                             &upstream_);
    // Holds keep the backend call alive while operations on it start from
    // the client side: one for the response flow, until its end; one for the
    // request flow of streaming requests, until the client half-closes or the
    // backend stops taking messages.
    upstream_.AddHold();
    if (has_first_message_) {
      if (single_request(rpc_)) {
        upstream_.StartWriteLast(&request_, grpc::WriteOptions());
      } else {
        upstream_.AddHold();
        upstream_.StartWrite(&request_);
      }
    } else {
      upstream_.StartWritesDone();
    }
    upstream_.StartCall();
  }

  /// Copies the backend's initial metadata onto the client call.
  void pass_headers() {
    const auto& md = client_ctx_.GetServerInitialMetadata();
    got_headers_ = got_headers_ || !md.empty();
    for (const auto& [k, v] : md) {
      if (!transport_header(view(k)))
        ctx_->AddInitialMetadata(std::string(view(k)), std::string(view(v)));
    }
  }

  void on_backend_headers(bool ok) {
    if (!ok) {  // trailers-only answer: on_backend_done has it all
      std::lock_guard lock{mu_};
      backend_eof_ = true;
      if (!end_response_flow_locked()) return;
    } else {
      got_headers_ = true;
      pass_headers();
      // A stream shows the backend's headers at once (a long query shows
      // them before its first result).
      return StartSendInitialMetadata();
    }
    upstream_.RemoveHold();
  }

  // The response flow is double-buffered: while one message is written to
  // the client, the next is read from the backend — one read and one write
  // in flight, no more, so a slow client slows the backend.

  void start_backend_read() {
    {
      std::lock_guard lock{mu_};
      backend_reading_ = true;
    }
    upstream_.StartRead(&response_[read_slot_]);
  }

  void on_backend_message(bool ok) {
    if (ok && responses_++ == 0) learn_from_first_response(response_[read_slot_]);
    if (ok) core::bump(core::global_metrics().forward_response_bytes_total, response_[read_slot_].Length());
    int write = -1, read = -1;
    bool end_flow = false;
    {
      std::lock_guard lock{mu_};
      backend_reading_ = false;
      if (!ok) {
        backend_eof_ = true;
        end_flow = end_response_flow_locked();
      } else if (client_gone_) {
        end_flow = end_response_flow_locked();
      } else if (client_writing_) {
        parked_ = true;  // written when the write in flight completes
      } else {
        write = take_read_slot_locked();
        read = read_slot_;
      }
    }
    if (end_flow) return upstream_.RemoveHold();
    if (write >= 0) StartWrite(&response_[write]);
    if (read >= 0) upstream_.StartRead(&response_[read]);
  }

  /// Hands the slot just read to the writer and flips reads to the other
  /// slot; marks both directions busy.
  int take_read_slot_locked() {
    int slot = read_slot_;
    read_slot_ ^= 1;
    client_writing_ = true;
    backend_reading_ = true;
    return slot;
  }

  /// True once, when the response flow is over: no backend read in flight
  /// and none to come.
  bool end_response_flow_locked() {
    if (flow_ended_ || backend_reading_ || !(backend_eof_ || client_gone_)) return false;
    flow_ended_ = true;
    return true;
  }

  void on_backend_write_done(bool ok) {
    if (single_request(rpc_)) return;
    // A failed write means the backend call ended; on_backend_done says why.
    if (ok)
      StartRead(&request_);
    else
      upstream_.RemoveHold();
  }

  void on_backend_done(const grpc::Status& status) {
    backend_->in_flight.fetch_sub(1, std::memory_order_relaxed);
    grpc::Status out = status;
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !got_headers_) {
      // Nothing came from the backend: the gateway could not reach it.
      core::bump(core::global_metrics().forward_backend_unavailable_total);
      backend_->unavailable_total.fetch_add(1, std::memory_order_relaxed);
      out = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         "scg: backend " + backend_->name + " (" + backend_->address +
                             ") is unavailable: " + status.error_message(),
                         status.error_details());
      log_.warn("backend_unavailable request_id={} rpc={} backend={} reason=\"{}\"", request_id_,
                rpc_name(rpc_), backend_->name, status.error_message());
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && execution_limit_ &&
        std::chrono::system_clock::now() >= *execution_limit_)
      out = kill_execution();
    if (bad_stream_message_)
      out = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         std::string("request is not a valid ") + std::string(rpc_name(rpc_)) + " message");
    if (status.ok()) learn_from_success();
    for (const auto& [k, v] : client_ctx_.GetServerTrailingMetadata()) {
      if (!transport_header(view(k)))
        ctx_->AddTrailingMetadata(std::string(view(k)), std::string(view(v)));
    }
    log_.debug("done request_id={} rpc={} backend={} code={}", request_id_, rpc_name(rpc_),
               backend_->name, core::status_code_name(out.error_code()));
    bool now;
    {
      std::lock_guard lock{mu_};
      now = !client_writing_;
      if (!now) finish_pending_ = out;  // OnWriteDone finishes
    }
    if (now) finish(out);
    release();
  }

  // --- learning from the conversation ------------------------------------------

  void learn_operation(const std::string& op_id) {
    operation_id_ = op_id;
    fx_.table->add_op(op_id, backend_index_, key_, actors::now_ms());
    core::bump(core::global_metrics().router_operations_learned_total);
    fx_.router->operation_started(key_, op_id);
  }

  void learn_from_first_response(const grpc::ByteBuffer& msg) {
    if (rpc_ != rpc::execute_plan && rpc_ != rpc::clone_session) return;
    response_fields f;
    if (!scan_response(rpc_, segments_of(msg, slices_), f)) return;  // passed on as is
    if (rpc_ == rpc::execute_plan && fields_.operation_id.empty() && !f.operation_id.empty())
      learn_operation(f.operation_id);
    if (rpc_ == rpc::clone_session) {
      const auto& id = !f.new_session_id.empty() ? f.new_session_id : fields_.new_session_id;
      if (!id.empty())
        fx_.router->bind_clone(actors::session_key{identity_.tenant, fields_.user_id, id}.str(), backend_index_);
    }
  }

  void learn_from_success() {
    if (rpc_ == rpc::release_session && !fields_.session_id.empty()) {
      fx_.router->session_released(key_);
    } else if (rpc_ == rpc::release_execute && fields_.release_all &&
               fx_.table->erase_op(fields_.operation_id)) {
      core::bump(core::global_metrics().router_operations_released_total);
      fx_.router->operation_released(key_, fields_.operation_id);
    }
  }

  // --- security and overload ----------------------------------------------------

  /// Checks the caller's credential and resolves the tenant; false when the
  /// call was refused (UNAUTHENTICATED, with a reason that leaks nothing).
  bool authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
    if (!fx_.auth) return true;
    std::optional<std::string_view> authorization;
    if (auto it = md.find("authorization"); it != md.end()) authorization = view(it->second);
    auto headers = [&md](std::string_view key) -> std::optional<std::string_view> {
      auto it = md.find(grpc::string_ref(key.data(), key.size()));
      if (it == md.end()) return std::nullopt;
      return view(it->second);
    };
    auto r = fx_.auth->authenticate(authorization, headers);
    if (auto* fail = std::get_if<auth::failure>(&r)) {
      core::bump(core::global_metrics().auth_failures_total);
      core::audit("auth.failure", {{"rpc", rpc_name(rpc_)}, {"reason", fail->reason}, {"request_id", request_id_},
                                   {"peer", ctx_->peer()}});
      finish_local(grpc::StatusCode::UNAUTHENTICATED, "scg: " + fail->reason);
      return false;
    }
    identity_ = std::get<auth::identity>(std::move(r));
    return true;
  }

  /// Puts the verified user into a request message; false when it is not
  /// valid protobuf.
  bool rewrite_user(grpc::ByteBuffer& msg) {
    auto rewritten = auth::rewrite_user_id(flatten(msg), identity_.user_id);
    if (!rewritten) return false;
    msg = buffer_of(*rewritten);
    return true;
  }

  /// Rate limits and the executions bulkhead; false when the call was refused.
  bool admit() {
    if (fx_.limiter && fx_.limiter->enabled()) {
      auto a = fx_.limiter->try_acquire(identity_.tenant, fields_.user_id);
      if (!a.allowed) {
        core::bump(core::global_metrics().rate_limited_total);
        core::audit("rate_limited", {{"tenant", identity_.tenant}, {"user", fields_.user_id},
                                     {"session", fields_.session_id}, {"rpc", rpc_name(rpc_)},
                                     {"request_id", request_id_}});
        finish_retry_later(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "scg: rate limit of tenant " + identity_.tenant + " reached (rate_limits); retry after " +
                               std::to_string(a.retry_after.count()) + " ms",
                           a.retry_after);
        return false;
      }
    }
    if (!is_execution(rpc_)) return true;
    const auto cap = fx_.limits.for_tenant(identity_.tenant).max_executions;
    // Each replica holds its share of the cluster-wide cap, at least one.
    const int mine = cap > 0 ? std::max(1, static_cast<int>(std::ceil(cap * fx_.share.load()))) : 0;
    if (!fx_.executions.try_take(identity_.tenant, mine)) {
      core::bump(core::global_metrics().executions_refused_total);
      core::audit("execution.refused", {{"tenant", identity_.tenant}, {"user", fields_.user_id},
                                        {"session", fields_.session_id}, {"request_id", request_id_}});
      finish_retry_later(grpc::StatusCode::RESOURCE_EXHAUSTED,
                         "scg: tenant " + identity_.tenant + " runs " + std::to_string(mine) +
                             " executions through this replica, its share of limits.max_executions (" +
                             std::to_string(cap) + "); retry later",
                         std::chrono::seconds(1));
      return false;
    }
    holds_execution_slot_ = true;
    return true;
  }

  /// The execution outlived max_execution_secs: the backend is told to stop
  /// it, the client why its stream ended.
  grpc::Status kill_execution() {
    const auto secs = fx_.limits.for_tenant(identity_.tenant).max_execution_secs;
    const auto& op = !operation_id_.empty() ? operation_id_ : fields_.operation_id;
    if (!op.empty())
      send_interrupt(*backend_, fields_.session_id, fields_.user_id, op,
                     fx_.backend_tokens.for_tenant(identity_.tenant), request_id_);
    core::bump(core::global_metrics().executions_killed_total);
    core::audit("execution.killed", {{"tenant", identity_.tenant}, {"user", fields_.user_id},
                                     {"session", fields_.session_id}, {"operation", op},
                                     {"backend", backend_->name}, {"request_id", request_id_}});
    log_.warn("execution_killed request_id={} backend={} operation_id={} limit_secs={}", request_id_,
              backend_->name, op, secs);
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "scg: the execution ran longer than tenant " + identity_.tenant +
                            " may (limits.max_execution_secs = " + std::to_string(secs) + "); operation " +
                            (op.empty() ? std::string("(id unknown)") : op) + " was interrupted");
  }

  /// Hides the backend's own token if a (pre-4.0) server echoes it in Config.
  void redact_config() {
    // Look in place first: answers without the key (Spark 4.0+) are not copied.
    if (!mentions(response_[0], auth::authenticate_token_key)) return;
    auto bytes = flatten(response_[0]);
    std::string redacted;
    if (auth::redact_config_response(bytes, redacted) != auth::redact_outcome::redacted) return;
    response_[0] = buffer_of(redacted);
    core::bump(core::global_metrics().config_redactions_total);
  }

  // --- tracing (only with a `tracing:` block) -------------------------------------

  /// Continues the client's trace (its traceparent) or starts one; this
  /// call's span gets a new id, which the backend sees as its parent.
  void start_span(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
    span_start_ns_ = core::unix_now_ns();
    std::optional<core::trace_parent> inbound;
    if (auto it = md.find("traceparent"); it != md.end()) inbound = core::parse_traceparent(view(it->second));
    trace_ = inbound ? *inbound : core::trace_parent{core::new_trace_id(), {}, 1};
    if (inbound) parent_span_ = inbound->span;
    trace_->span = core::new_span_id();
  }

  /// Hands this call's span to the exporter (which never blocks).
  void end_span() {
    core::span s;
    s.trace = trace_->trace;
    s.id = trace_->span;
    s.parent = parent_span_;
    s.name = ctx_->method();
    s.start_unix_ns = span_start_ns_;
    s.end_unix_ns = core::unix_now_ns();
    // "/spark.connect.SparkConnectService/ExecutePlan": service, then method.
    const std::string_view path = s.name;
    const auto slash = path.rfind('/');
    const bool split = slash != std::string_view::npos && slash > 0;
    const auto service = split ? path.substr(1, slash - 1) : std::string_view();
    const auto method = split ? path.substr(slash + 1) : path;
    s.attributes = {{"rpc.system", "grpc"}, {"rpc.service", std::string(service)},
                    {"rpc.method", std::string(method)}};
    if (backend_) s.attributes.emplace_back("scg.backend", backend_->name);
    if (!identity_.tenant.empty()) s.attributes.emplace_back("scg.tenant", identity_.tenant);
    s.attributes.emplace_back("scg.request_id", request_id_);
    s.grpc_status_code = final_code_;
    s.error = final_code_ != 0;
    fx_.tracer->submit(std::move(s));
  }

  // --- finishing -----------------------------------------------------------------

  /// Refuses the call with `code` and a google.rpc.RetryInfo detail, which
  /// Spark clients honour by waiting `delay` before retrying.
  void finish_retry_later(grpc::StatusCode code, const std::string& message, std::chrono::milliseconds delay) {
    finish(grpc::Status(code, message, auth::retry_status_details(static_cast<int>(code), message, delay)));
  }

  /// Answers the client with a status scg produced itself (logged by the caller).
  void finish_local(grpc::StatusCode code, const std::string& message) {
    finish(grpc::Status(code, message));
  }

  /// Finishes the client call; a unary answer goes with its response in one
  /// batch. Called once, with no client write in flight.
  void finish(const grpc::Status& status) {
    final_code_ = status.error_code();
    if (status.ok() && unary_) {
      core::bump(core::global_metrics().forward_response_bytes_total, response_[0].Length());
      StartWriteAndFinish(&response_[0], grpc::WriteOptions(), status);
    } else {
      Finish(status);
    }
  }

  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  forward_context& fx_;
  grpc::GenericCallbackServerContext* ctx_;
  grpc::ClientContext client_ctx_;
  upstream_reactor upstream_;
  spdlog::logger& log_;
  const std::chrono::steady_clock::time_point started_;
  std::shared_ptr<actors::backend_state> backend_;

  rpc rpc_ = rpc::unknown;
  std::string request_id_;
  std::string key_;
  request_fields fields_;
  grpc::ByteBuffer request_;      // client → backend, one message in flight
  grpc::ByteBuffer response_[2];  // backend → client: one being read, one being written
  std::vector<grpc::Slice> slices_;
  bool routed_ = false;
  bool has_first_message_ = false;
  bool got_headers_ = false;  // the backend answered with headers: it was reached
  bool unary_ = false;        // forwarded as a unary call (start_unary)
  bool streaming_ = false;    // forwarded as a stream (start_stream): counted in active streams
  std::uint64_t responses_ = 0;
  backend_index backend_index_ = 0;
  int final_code_ = 0;
  auth::identity identity_{"", "", false};  // who calls, for which tenant
  std::string operation_id_;                // the execution's id, once known
  std::optional<std::chrono::system_clock::time_point> execution_limit_;  // max_execution_secs
  bool holds_execution_slot_ = false;
  bool bad_stream_message_ = false;  // a streamed message was not valid protobuf
  std::optional<core::trace_parent> trace_;  // this call's trace and span id; set only when tracing
  std::optional<core::span_id> parent_span_;  // the client's span; absent for a root span
  std::int64_t span_start_ns_ = 0;

  std::mutex mu_;  // guards what both sides touch, below
  bool upstream_started_ = false;
  bool cancelled_ = false;
  int read_slot_ = 0;             // response_ slot the next backend read fills
  bool backend_reading_ = false;  // a backend read is in flight
  bool client_writing_ = false;   // a client write is in flight
  bool parked_ = false;           // a message read, waiting for the client write
  bool backend_eof_ = false;      // the backend sent its last message
  bool client_gone_ = false;      // the client cannot take more
  bool flow_ended_ = false;       // the response-flow hold was removed
  std::optional<grpc::Status> finish_pending_;
  std::atomic<int> refs_{1};  // the client side; the backend side adds one
};

}  // namespace

grpc::ServerGenericBidiReactor* start_forward(forward_context& fx,
                                              grpc::GenericCallbackServerContext* ctx) {
  return new forward_call(fx, ctx);
}

}  // namespace scg::net
