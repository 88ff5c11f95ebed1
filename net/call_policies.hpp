#pragma once
// The policies of one forwarded call: what scg decides about it besides
// moving its bytes. forward_call (net/forwarder.cpp) keeps the phase machine
// and calls them at named points of its flow:
//
//   headers         check_grpc_call: a gRPC call of a Spark Connect method;
//                   authenticate: the caller's credential and tenant (auth)
//   first message   scan_first: its routing fields (inflated once, with
//                   message_reader, for every reader); user_rewrite: the user
//                   Spark sees, written into every request (rewrite);
//                   execution_claim::admit, in
//                   net/admission.hpp: rate limits, the tenant's bulkheads
//                   (admission); execution_limit::arm, once the backend is
//                   known: when an execution must end (interrupts)
//   first response  id_learning: operation ids and cloned sessions into the
//                   index (learning ids); redact_config: the backend's own
//                   token hidden from Config (redaction)
//   end             id_learning::on_success: what a release ended is
//                   forgotten; execution_limit::kill when the limit came
//                   first (interrupts); call_accounting: usage, the rpc.error
//                   audit, the rpc counters (accounting)
//
// They read and fill what the call knows (call_facts). Only call_accounting
// sees every response message, inline (no virtual call per message).
// Whatever scg answers a call itself is a local_answer (below).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/fwd.h>

#include "actors/backend.hpp"
#include "auth/authenticator.hpp"
#include "core/local_reply.hpp"
#include "net/admission.hpp"
#include "net/forwarder.hpp"
#include "net/h2/connection.hpp"
#include "net/relay.hpp"
#include "net/wire.hpp"

namespace scg::net {

/// What a call knows of itself, filled in as its steps learn it.
struct call_facts {
  rpc kind = rpc::unknown;
  std::string request_id;
  auth::identity identity{"", "", false};  ///< who calls, for which tenant
  request_fields fields;                   ///< the first message's routing fields; user_id: the verified one
  std::string spark_user;                  ///< the user id Spark sees (auth::spark_user_id)
  std::string key;                         ///< the session key (tenant, user, session)
  actors::backend_index backend_index = 0;
  std::shared_ptr<actors::backend_state> backend;  ///< null until a backend was chosen
  std::string operation_id;                        ///< the execution's id, once known
};

/// The value of request header `key` in `metadata`, or nullopt.
std::optional<std::string_view> find_header(const h2::header_list& metadata, std::string_view key);

/// At the headers, before auth: the call is gRPC (POST, content-type
/// application/grpc) for a Spark Connect method; the refusal when not.
std::optional<refusal> check_grpc_call(const std::string& path, const std::string& content_type, bool bad_method);

/// Auth, at the headers: checks the caller's credential and resolves its
/// tenant into facts.identity. The refusal (UNAUTHENTICATED, with a reason
/// that leaks nothing; audited with `client`'s peer) when it fails.
std::optional<refusal> authenticate(const forward_context& fx, const h2::header_list& metadata, call_facts& facts,
                                    const h2::connection& client);

/// At the first message: reads its routing fields into facts.fields (its
/// `body` inflated when it came compressed under `encoding`). The refusal
/// when it inflates past limits.max_message_bytes, cannot be inflated, or is
/// not a valid request.
std::optional<refusal> scan_first(const forward_context& fx, call_facts& facts, message_reader& body,
                                  const std::string& encoding);
/// What a request that is not a valid message of `kind` is told.
std::string not_valid_text(rpc kind);

/// Rewrite, from the first message on: the user id Spark sees is the
/// verified one, qualified by its tenant (Spark keys sessions by user and
/// session id alone: tenants must not meet), and every request carries it.
class user_rewrite {
 public:
  /// At the first message (or the request's end), its fields scanned: sets
  /// facts.fields.user_id and facts.spark_user.
  void decide(const forward_context& fx, call_facts& facts);
  /// Requests carry facts.spark_user instead of their own user id.
  bool active() const { return active_; }
  /// Writes `user` into `msg`, read through `body`; false when it is not
  /// valid protobuf.
  static bool apply(held_message& msg, message_reader& body, const std::string& user);

 private:
  bool active_ = false;
};

/// A held response as the policies read it: inflated at most once, its
/// routing fields scanned at most once.
class response_view {
 public:
  response_view(const held_message& msg, rpc kind, const std::string& encoding, std::size_t limit)
      : body_(msg, encoding, limit), kind_(kind) {}
  message_reader& body() { return body_; }
  /// Its routing fields; null when it is not a valid response (it is passed on as is).
  const response_fields* fields();

 private:
  message_reader body_;
  const rpc kind_;
  bool scanned_ = false, valid_ = false;
  response_fields fields_;
};

/// Learning ids: the operation index learns an execution's id (the
/// client's, or its first response's) and a clone's new session; a release
/// that succeeded makes it forget.
class id_learning {
 public:
  /// `op` is the call's operation: its execution adopts it (its slot and
  /// start), the index and the router learn it.
  static void operation(forward_context& fx, call_facts& facts, execution_claim& execution, const std::string& op);
  /// True until the first response of an RPC it learns from was read.
  bool wants_first(rpc kind) const {
    return !learned_ && (kind == rpc::execute_plan || kind == rpc::clone_session);
  }
  /// The first response (wants_first): its operation id, or the key of the
  /// session a CloneSession made, which must be bound before the answer goes
  /// on ("" when none).
  std::string first_response(forward_context& fx, call_facts& facts, execution_claim& execution,
                             response_view& response);
  /// The backend answered OK: a released session or operation is forgotten.
  static void on_success(forward_context& fx, const call_facts& facts);

 private:
  bool learned_ = false;
};

/// Redaction, at Config's first response: hides the backend's token when a
/// server echoes it (it does when the token was given in SparkConf): under its
/// key, what get_all(prefix) leaves of its key, or any key whose value is a
/// token scg holds.
void redact_config(const forward_context& fx, held_message& msg, message_reader& body);

/// Interrupts: an execution may run for its tenant's max_execution_secs,
/// counted from its operation's start (a reattach continues it); then scg
/// interrupts it on the backend and ends its stream.
class execution_limit {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  /// As the backend stream starts: the execution's limit, when one applies
  /// (not to one that waits rather than computes: net/admission.hpp) and it
  /// comes before the call's `deadline`.
  std::optional<time_point> arm(const forward_context& fx, const call_facts& facts, const execution_claim& execution,
                                const std::optional<time_point>& deadline);
  bool armed() const { return limit_.has_value(); }
  /// The limit has come.
  bool reached() const { return limit_ && std::chrono::steady_clock::now() >= *limit_; }
  /// Interrupts the execution on its backend (fire and forget), audited;
  /// what the client is told (RESOURCE_EXHAUSTED without RetryInfo: no
  /// client retries or reattaches it).
  static std::string kill(forward_context& fx, const call_facts& facts, execution_claim& execution);

 private:
  std::optional<time_point> limit_;
};

/// Accounting: what a call cost its tenant and user (core/usage.hpp), and
/// how it ended (the rpc counters, the rpc.error audit), recorded once at
/// its end.
class call_accounting {
 public:
  /// scg answered the call itself, for `why`.
  void rejected(core::local_reason why) { rejection_ = why; }
  /// The backend stream starts (an execution's time counts from here).
  void reached_backend() { upstream_started_ = std::chrono::steady_clock::now(); }

  /// A response message of an execution starts: its bytes are counted, and
  /// its rows read as it passes when `rows` (usage is on) and it is uncompressed.
  void result(const h2::message_header& h, bool rows) {
    result_bytes_ += h.length;
    counting_rows_ = rows && !h.compressed;
    if (counting_rows_) rows_reader_.start(h.length);
  }
  /// Bytes of the current response message's body, as they pass.
  void body(const h2::slice& s) {
    if (counting_rows_) rows_reader_.feed(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  }
  /// The current response message ended.
  void response_end() {
    if (!counting_rows_) return;
    result_rows_ += rows_reader_.rows();
    counting_rows_ = false;
  }

  /// At the call's end (both streams closed): `reached`, a backend stream
  /// was opened; `started`, when the call's headers came.
  void end(const forward_context& fx, const call_facts& facts, int final_code, bool reached,
           std::chrono::steady_clock::time_point started) const;

 private:
  std::optional<core::local_reason> rejection_;  // why scg answered the call itself
  std::chrono::steady_clock::time_point upstream_started_{};
  std::uint64_t result_bytes_ = 0, result_rows_ = 0;
  bool counting_rows_ = false;  // the current response is read for its row_count
  arrow_rows_reader rows_reader_;
};

/// A status scg answers itself (forward_call::finish_local): its code, and
/// the trailers that end the answer (`with_headers`: a whole trailers-only
/// answer, the client having no response headers yet).
struct local_answer {
  int code;
  h2::header_list status;
};

/// The answer for `why` (its row in core/local_reply.hpp) saying `message`.
/// A "retry later" row answers UNAVAILABLE with `retry_unavailable`
/// (limits.retry_status) and carries a google.rpc.RetryInfo of
/// `retry_after` (1 s when zero), which Spark clients honour.
local_answer make_local_answer(core::local_reason why, const std::string& message,
                               std::chrono::milliseconds retry_after, bool retry_unavailable, bool with_headers);

/// Its log line, named by its reason; info and warn lines at most once per
/// reason per 10 s (a flood says how many it held back).
void log_local_answer(spdlog::logger& log, core::local_reason why, int code, const std::string& message,
                      const call_facts& facts, const h2::connection& client);

}  // namespace scg::net
