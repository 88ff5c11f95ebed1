#include "tools/fake_spark/fake_server.hpp"

#include <grpcpp/generic/async_generic_service.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/grpcpp.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <climits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/protowire.hpp"
#include "google_rpc.pb.h"
#include "spark_connect.grpc.pb.h"
#include "tools/fake_spark/delayed_executor.hpp"
#include "tools/fake_spark/fake_state.hpp"

namespace scg::fake {
namespace {

namespace sc = spark::connect;
using grpc::CallbackServerContext;
using result_writer = grpc::ServerWriteReactor<sc::ExecutePlanResponse>;

// ------------------------------------------------------------------ errors

/// Packs `m` into `any` with deterministic map order, so two identical errors
/// are identical bytes (tests compare details byte for byte).
void pack_deterministic(const google::protobuf::Message& m, google::protobuf::Any* any) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&out);
  }
  any->set_type_url("type.googleapis.com/" + m.GetDescriptor()->full_name());
  any->set_value(std::move(bytes));
}

/// A status in Spark's shape (its ErrorUtils): message "[class] text SQLSTATE: state",
/// and google.rpc.Status details carrying an ErrorInfo with reason = the Java
/// exception class, metadata classes / errorClass / messageParameters / sqlState,
/// plus `backend` (the emulator's own, so tests see which server answered), and
/// RetryInfo if asked.
grpc::Status spark_status(grpc::StatusCode code, const spark_error& error,
                          const std::string& backend, bool with_retry_info) {
  std::string message = "[" + error.error_class + "] " + error.text;
  if (!error.sql_state.empty()) message += " SQLSTATE: " + error.sql_state;
  const bool spark_class = error.error_class.rfind("FAKE.", 0) != 0;
  google::rpc::ErrorInfo info;
  info.set_reason(spark_class ? "org.apache.spark.SparkSQLException" : error.error_class);
  info.set_domain("org.apache.spark");
  auto& metadata = *info.mutable_metadata();
  if (spark_class)
    metadata["classes"] =
        R"(["org.apache.spark.SparkSQLException","java.sql.SQLException","java.lang.Exception","java.lang.Throwable"])";
  metadata["errorClass"] = error.error_class;
  metadata["messageParameters"] = nlohmann::json(error.parameters).dump();
  if (!error.sql_state.empty()) metadata["sqlState"] = error.sql_state;
  metadata["backend"] = backend;
  google::rpc::Status details;
  details.set_code(code);
  details.set_message(message);
  pack_deterministic(info, details.add_details());
  if (with_retry_info) {
    google::rpc::RetryInfo retry;
    retry.mutable_retry_delay()->set_seconds(1);
    retry.mutable_retry_delay()->set_nanos(500'000'000);
    pack_deterministic(retry, details.add_details());
  }
  return {code, message, details.SerializeAsString()};
}

/// Spark sends its own errors as INTERNAL.
grpc::Status to_status(fake_state& state, const spark_error& error) {
  state.count_error(error.error_class);
  return spark_status(grpc::StatusCode::INTERNAL, error, state.name(), false);
}

// ------------------------------------------------------------- call prologue

std::optional<std::string> header(const CallbackServerContext& ctx, const std::string& key) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

/// A non-negative integer header; anything else counts as absent.
std::optional<int64_t> number_header(const CallbackServerContext& ctx, const std::string& key) {
  auto text = header(ctx, key);
  if (!text) return std::nullopt;
  int64_t value = 0;
  const char* last = text->data() + text->size();
  auto [end, ec] = std::from_chars(text->data(), last, value);
  if (ec != std::errc() || end != last || value < 0) return std::nullopt;
  return value;
}

/// Per-request overrides of the command-line stream settings.
struct request_knobs {
  std::optional<int64_t> responses, payload_bytes, delay_ms, stream_max, rows_per_batch, metrics;
};

struct call_prologue {
  request_knobs knobs;
  std::optional<grpc::Status> failure;  // x-fake-fail asked for this status
};

/// What every call does first, the generic ones included: count it, name the backend,
/// echo x-echo-* headers (initial metadata as is, trailing as x-echo-trailer-<rest>),
/// report the x-request-id the gateway forwarded, read the knobs, honour x-fake-fail.
call_prologue begin_call(CallbackServerContext& ctx, fake_state& state, const std::string& method) {
  static const std::string echo_prefix = "x-echo-";
  state.count_rpc(method);
  ctx.AddInitialMetadata("x-fake-backend", state.name());
  ctx.AddInitialMetadata("x-fake-traceparent", header(ctx, "traceparent").value_or("none"));
  for (const auto& [key_ref, value_ref] : ctx.client_metadata()) {
    const std::string key(key_ref.data(), key_ref.size());
    if (key.size() <= echo_prefix.size() || key.compare(0, echo_prefix.size(), echo_prefix) != 0)
      continue;
    // Binary (-bin) values arrive decoded and are re-encoded by gRPC: they round-trip.
    const std::string value(value_ref.data(), value_ref.size());
    ctx.AddInitialMetadata(key, value);
    ctx.AddTrailingMetadata("x-echo-trailer-" + key.substr(echo_prefix.size()), value);
  }
  ctx.AddTrailingMetadata("x-fake-request-id", header(ctx, "x-request-id").value_or("none"));

  call_prologue call;
  call.knobs = {number_header(ctx, "x-fake-responses"), number_header(ctx, "x-fake-payload-bytes"),
                number_header(ctx, "x-fake-delay-ms"),
                number_header(ctx, "x-fake-stream-max-responses"), number_header(ctx, "x-fake-rows-per-batch"),
                number_header(ctx, "x-fake-metrics")};
  if (!state.required_token().empty() &&
      header(ctx, "authorization").value_or("") != "Bearer " + state.required_token()) {
    state.count_error("FAKE.UNAUTHENTICATED");
    call.failure = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                "[FAKE.UNAUTHENTICATED] authorization is missing or not the server's token");
    return call;
  }
  auto code = number_header(ctx, "x-fake-fail");
  if (code && *code > 0 && *code <= grpc::StatusCode::UNAUTHENTICATED) {
    state.count_error("FAKE.INJECTED");
    call.failure = spark_status(static_cast<grpc::StatusCode>(*code),
                                {"FAKE.INJECTED", "injected failure", "", {}}, state.name(), true);
  }
  return call;
}

template <class Request>
session_key key_of(const Request& request) {
  return {request.user_context().user_id(), request.session_id()};
}

template <class Request>
std::optional<std::string> observed(const Request& request) {
  if (!request.has_client_observed_server_side_session_id()) return std::nullopt;
  return request.client_observed_server_side_session_id();
}

grpc::ServerUnaryReactor* reply(CallbackServerContext* ctx, const grpc::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

/// A reactor of any kind that ends its call at once, e.g. with an injected failure.
template <class Reactor>
class finished_reactor final : public Reactor {
 public:
  explicit finished_reactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// ------------------------------------------------------------ result streams

std::string make_payload(int64_t size) {
  std::string bytes(static_cast<size_t>(size), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i % 26);
  return bytes;
}

/// Streams an operation's responses from a cursor. Each response is generated from its
/// index, so memory stays at one message whatever the result size. One write is in
/// flight at a time; the next step starts from OnWriteDone or from the timer.
class result_stream_reactor final : public result_writer {
 public:
  result_stream_reactor(fake_state& state, delayed_executor& timer,
                        const std::atomic<bool>& stopping, session_key key,
                        const std::string& server_side_id, stream_cursor cursor)
      : state_(state),
        timer_(timer),
        stopping_(stopping),
        key_(std::move(key)),
        cursor_(std::move(cursor)),
        next_index_(cursor_.first_index) {
    response_.set_session_id(key_.session_id);
    response_.set_server_side_session_id(server_side_id);
    response_.set_operation_id(cursor_.op_id);
    step();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // the call is broken; nobody will read this status
      Finish(grpc::Status::CANCELLED);
      return;
    }
    state_.record_sent(key_, cursor_.op_id, next_index_, response_.ByteSizeLong());
    ++next_index_;
    ++sent_;
    if (cursor_.shape.delay_ms > 0 && !all_sent() && !cut_due()) {
      timer_.schedule(std::chrono::milliseconds(cursor_.shape.delay_ms), [this] { step(); });
      return;
    }
    step();
  }

  /// The client left, its deadline passed, or the server is stopping.
  void OnCancel() override {
    cancelled_ = true;
    state_.count_stream_cancelled();
  }
  void OnDone() override {
    state_.stream_ended(key_, cursor_.op_id, cursor_.stream);
    delete this;
  }

 private:
  bool all_sent() const { return next_index_ >= cursor_.shape.total(); }
  bool cut_due() const { return cursor_.shape.stream_max > 0 && sent_ >= cursor_.shape.stream_max; }

  void step() {
    // The end comes first: a client may release the operation as soon as it has
    // result_complete, and that must not turn this finished stream into an error.
    if (all_sent()) {
      Finish(grpc::Status::OK);
      return;
    }
    if (cancelled_) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    // A stopping server ends its streams rather than racing through their delays.
    if (stopping_) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "scg-fake-spark is shutting down"));
      return;
    }
    // Like Spark's senderMaxStreamSize: end OK without result_complete; the client reattaches.
    if (cut_due()) {
      state_.count_stream_cut();
      Finish(grpc::Status::OK);
      return;
    }
    if (auto error = state_.check_stream(key_, cursor_.op_id, cursor_.stream)) {
      Finish(to_status(state_, *error));
      return;
    }
    fill(next_index_);
    StartWrite(&response_);
  }

  void fill(int64_t index) {
    response_.set_response_id(response_id(cursor_.op_id, index));
    response_.GetReflection()->MutableUnknownFields(&response_)->Clear();  // the metrics of an earlier fill
    const auto& shape = cursor_.shape;
    if (shape.metrics && index == shape.responses) {
      response_.clear_response_type();
      add_metrics(shape.responses * shape.rows_per_batch);
      return;
    }
    if (index >= shape.responses) {
      response_.mutable_result_complete();
      return;
    }
    auto* batch = response_.mutable_arrow_batch();
    batch->set_row_count(shape.rows_per_batch);
    // Every batch carries the same bytes, built once per stream.
    if (batch->data().size() != static_cast<size_t>(cursor_.shape.payload_bytes))
      batch->set_data(make_payload(cursor_.shape.payload_bytes));
  }

  /// ExecutePlanResponse.metrics (field 4) as Spark sends it after the last
  /// batch: one plan node whose numOutputRows is the rows sent. scg's proto
  /// does not declare Metrics, so it travels as a field protobuf keeps unknown.
  void add_metrics(int64_t rows) {
    namespace pw = scg::core::protowire;
    std::string value, entry, node, metrics;
    pw::put_bytes(value, 1, "number of output rows");  // MetricValue: name 1, value 2, metric_type 3
    pw::put_uint(value, 2, static_cast<uint64_t>(rows));
    pw::put_bytes(value, 3, "sum");
    pw::put_bytes(entry, 1, "numOutputRows");  // a map<string, MetricValue> entry: key 1, value 2
    pw::put_bytes(entry, 2, value);
    pw::put_bytes(node, 1, "FakeScan");  // MetricObject: name 1, plan_id 2, parent 3, execution_metrics 4
    pw::put_uint(node, 2, 1);
    pw::put_uint(node, 3, 1);
    pw::put_bytes(node, 4, entry);
    pw::put_bytes(metrics, 1, node);  // Metrics: repeated MetricObject metrics = 1
    response_.GetReflection()->MutableUnknownFields(&response_)->AddLengthDelimited(4, metrics);
  }

  fake_state& state_;
  delayed_executor& timer_;
  const std::atomic<bool>& stopping_;
  const session_key key_;
  const stream_cursor cursor_;
  int64_t next_index_;
  int64_t sent_ = 0;
  std::atomic<bool> cancelled_{false};
  sc::ExecutePlanResponse response_;
};

// ----------------------------------------------------------------- artifacts

/// AddArtifacts payloads, read as Spark reads them: batch = 3: repeated
/// SingleChunkArtifact{name = 1, data = 2}; begin_chunk = 4: {name = 1,
/// num_chunks = 3, initial_chunk = 4}; chunk = 5; an ArtifactChunk is
/// {data = 1, crc = 2}. Whether a chunk's crc is the CRC-32 of its data:
bool chunk_crc_ok(std::string_view chunk) {
  namespace pw = scg::core::protowire;
  std::string_view data;
  std::uint64_t crc = 0;
  pw::field f;
  while (pw::next(chunk, f)) {
    if (f.number == 1 && f.type == 2) data = f.payload;
    if (f.number == 2 && f.type == 0) crc = f.varint;
  }
  const auto actual = ::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()));
  return actual == crc;
}

/// Reads an AddArtifacts upload to its end, then adds its artifacts to the
/// session: one summary per artifact of a batch, one per chunked artifact
/// once its chunks are in, each with is_crc_successful. ArtifactStatus
/// reports the `cache/` ones as existing (as Spark does: it looks only there).
class artifact_upload_reactor final : public grpc::ServerReadReactor<sc::AddArtifactsRequest> {
 public:
  artifact_upload_reactor(fake_state& state, sc::AddArtifactsResponse& response)
      : state_(state), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or left: then nobody reads the answer)
      finish_upload();
      return;
    }
    if (messages_++ == 0) {
      key_ = key_of(request_);
      observed_ = observed(request_);
    } else if (request_.user_context().user_id() != key_.user_id) {
      mixed_users_ = true;  // one upload, one session: a gateway must not let users differ
    }
    read_payload();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  void read_payload() {
    namespace pw = scg::core::protowire;
    pw::field f;
    if (request_.has_batch()) {
      std::string_view batch = request_.batch();
      while (pw::next(batch, f)) {
        if (f.number != 1 || f.type != 2) continue;
        std::string_view one = f.payload, name;
        bool crc_ok = false;
        pw::field g;
        while (pw::next(one, g)) {
          if (g.number == 1 && g.type == 2) name = g.payload;
          if (g.number == 2 && g.type == 2) crc_ok = chunk_crc_ok(g.payload);
        }
        done_.push_back({std::string(name), crc_ok});
      }
    } else if (request_.has_begin_chunk()) {
      std::string_view begin = request_.begin_chunk();
      chunked_ = {};
      chunks_left_ = 0;
      while (pw::next(begin, f)) {
        if (f.number == 1 && f.type == 2) chunked_.name = f.payload;
        if (f.number == 3 && f.type == 0) chunks_left_ = f.varint;
        if (f.number == 4 && f.type == 2) chunked_.crc_ok = chunk_crc_ok(f.payload);
      }
      chunk_done();
    } else if (request_.has_chunk() && chunks_left_ > 0) {
      chunked_.crc_ok = chunk_crc_ok(request_.chunk()) && chunked_.crc_ok;
      chunk_done();
    }
  }

  void chunk_done() {
    if (chunks_left_ > 0) --chunks_left_;
    if (chunks_left_ == 0) done_.push_back(chunked_);
  }

  void finish_upload() {
    if (messages_ == 0) {
      Finish(grpc::Status::OK);
      return;
    }
    if (mixed_users_) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "[FAKE.MIXED_USERS] the messages of one AddArtifacts call name different users"));
      return;
    }
    std::string server_side_id;
    auto error =
        state_.with_session(key_, observed_, true, [&](session_state& session) -> maybe_error {
          server_side_id = session.server_side_id;
          for (const auto& a : done_)
            if (a.crc_ok) session.artifacts.insert(a.name);
          return std::nullopt;
        });
    if (error) {
      Finish(to_status(state_, *error));
      return;
    }
    response_.set_session_id(key_.session_id);
    response_.set_server_side_session_id(server_side_id);
    for (const auto& a : done_) {
      auto* summary = response_.add_artifacts();
      summary->set_name(a.name);
      summary->set_is_crc_successful(a.crc_ok);
    }
    Finish(grpc::Status::OK);
  }

  struct artifact {
    std::string name;
    bool crc_ok = true;
  };
  fake_state& state_;
  sc::AddArtifactsResponse& response_;
  sc::AddArtifactsRequest request_;
  session_key key_;
  std::optional<std::string> observed_;
  std::size_t messages_ = 0;
  std::vector<artifact> done_;
  artifact chunked_;  // the chunked artifact under way
  std::uint64_t chunks_left_ = 0;
  bool mixed_users_ = false;
};

// ---------------------------------------------------------- unknown methods

/// Echoes each request message of a method the emulator does not declare, so tests
/// can check that the gateway forwards methods it does not know.
class echo_reactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit echo_reactor(fake_state& state) : state_(state) { StartRead(&message_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed
      Finish(grpc::Status::OK);
      return;
    }
    state_.count_bytes(message_.Length());
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  fake_state& state_;
  grpc::ByteBuffer message_;
};

class echo_service final : public grpc::CallbackGenericService {
 public:
  explicit echo_service(fake_state& state) : state_(state) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    auto call = begin_call(*ctx, state_, ctx->method());
    if (call.failure) return new finished_reactor<grpc::ServerGenericBidiReactor>(*call.failure);
    return new echo_reactor(state_);
  }

 private:
  fake_state& state_;
};

// ------------------------------------------------------------- the service

enum class session_use { create, existing, existing_unobserved };

/// Whether the client asked for a reattachable execution (PySpark does by default).
bool reattachable(const sc::ExecutePlanRequest& request) {
  for (const auto& option : request.request_options())
    if (option.has_reattach_options() && option.reattach_options().reattachable()) return true;
  return false;
}

class spark_service final : public sc::SparkConnectService::CallbackService {
 public:
  spark_service(fake_state& state, delayed_executor& timer, const options& defaults)
      : state_(state), timer_(timer), defaults_(defaults) {}

  /// From now on every result stream ends at its next step.
  void begin_shutdown() { stopping_ = true; }

  result_writer* ExecutePlan(CallbackServerContext* ctx,
                             const sc::ExecutePlanRequest* request) override {
    auto call = begin_call(*ctx, state_, "ExecutePlan");
    if (call.failure) return new finished_reactor<result_writer>(*call.failure);
    const result_shape shape{call.knobs.responses.value_or(defaults_.responses),
                             call.knobs.payload_bytes.value_or(defaults_.payload_bytes),
                             call.knobs.delay_ms.value_or(defaults_.delay_ms),
                             call.knobs.stream_max.value_or(defaults_.stream_max_responses),
                             call.knobs.rows_per_batch.value_or(defaults_.rows_per_batch),
                             call.knobs.metrics.value_or(defaults_.metrics) != 0,
                             reattachable(*request)};
    // Clients that do not choose an operation id learn the generated one from the stream.
    const std::string op_id =
        request->operation_id().empty() ? random_uuid() : request->operation_id();
    std::vector<std::string> tags(request->tags().begin(), request->tags().end());
    std::string server_side_id;
    stream_cursor cursor;
    auto error = state_.with_session(key_of(*request), observed(*request), true,
                                     [&](session_state& session) {
                                       server_side_id = session.server_side_id;
                                       return session.start(op_id, std::move(tags), shape, cursor);
                                     });
    if (error) return new finished_reactor<result_writer>(to_status(state_, *error));
    return new result_stream_reactor(state_, timer_, stopping_, key_of(*request), server_side_id,
                                     cursor);
  }

  result_writer* ReattachExecute(CallbackServerContext* ctx,
                                 const sc::ReattachExecuteRequest* request) override {
    auto call = begin_call(*ctx, state_, "ReattachExecute");
    if (call.failure) return new finished_reactor<result_writer>(*call.failure);
    std::optional<std::string> last_response_id;
    if (request->has_last_response_id()) last_response_id = request->last_response_id();
    std::string server_side_id;
    stream_cursor cursor;
    auto error = state_.with_session(
        key_of(*request), observed(*request), false, [&](session_state& session) {
          server_side_id = session.server_side_id;
          return session.attach(request->operation_id(), last_response_id, cursor);
        });
    if (error) return new finished_reactor<result_writer>(to_status(state_, *error));
    // Pace and cut belong to a stream: this request's headers beat the operation's.
    cursor.shape.delay_ms = call.knobs.delay_ms.value_or(cursor.shape.delay_ms);
    cursor.shape.stream_max = call.knobs.stream_max.value_or(cursor.shape.stream_max);
    return new result_stream_reactor(state_, timer_, stopping_, key_of(*request), server_side_id,
                                     cursor);
  }

  grpc::ServerReadReactor<sc::AddArtifactsRequest>* AddArtifacts(
      CallbackServerContext* ctx, sc::AddArtifactsResponse* response) override {
    auto call = begin_call(*ctx, state_, "AddArtifacts");
    if (call.failure)
      return new finished_reactor<grpc::ServerReadReactor<sc::AddArtifactsRequest>>(*call.failure);
    return new artifact_upload_reactor(state_, *response);
  }

  grpc::ServerUnaryReactor* AnalyzePlan(CallbackServerContext* ctx,
                                        const sc::AnalyzePlanRequest* request,
                                        sc::AnalyzePlanResponse* response) override {
    return unary(ctx, "AnalyzePlan", *request, *response, session_use::create,
                 [](session_state&) -> maybe_error { return std::nullopt; });
  }

  grpc::ServerUnaryReactor* Config(CallbackServerContext* ctx, const sc::ConfigRequest* request,
                                   sc::ConfigResponse* response) override {
    return unary(ctx, "Config", *request, *response, session_use::create,
                 [&](session_state& session) -> maybe_error {
                   // A session's confs, as Spark keeps them: set, unset, and get (get_option) them.
                   sc::ConfigOperation op;
                   if (op.ParseFromString(request->operation())) {
                     if (op.has_set())
                       for (const auto& kv : op.set().pairs()) session.conf[kv.key()] = kv.value();
                     for (const auto& k : op.unset().keys()) session.conf.erase(k);
                     const auto& keys = op.has_get() ? op.get().keys() : op.get_option().keys();
                     for (const auto& k : keys) {
                       auto* pair = response->add_pairs();
                       pair->set_key(k);
                       if (auto it = session.conf.find(k); it != session.conf.end()) pair->set_value(it->second);
                     }
                   }
                   add_pair(*response, "spark.fake.backend", state_.name());
                   if (auto eq = defaults_.config_echo.find('='); eq != std::string::npos)
                     add_pair(*response, defaults_.config_echo.substr(0, eq), defaults_.config_echo.substr(eq + 1));
                   return std::nullopt;
                 });
  }

  grpc::ServerUnaryReactor* ArtifactStatus(CallbackServerContext* ctx,
                                           const sc::ArtifactStatusesRequest* request,
                                           sc::ArtifactStatusesResponse* response) override {
    return unary(
        ctx, "ArtifactStatus", *request, *response, session_use::create,
        [&](session_state& session) -> maybe_error {
          for (const auto& name : request->names())
            (*response->mutable_statuses())[name].set_exists(name.rfind("cache/", 0) == 0 &&
                                                             session.artifacts.count(name) > 0);
          return std::nullopt;
        });
  }

  grpc::ServerUnaryReactor* Interrupt(CallbackServerContext* ctx,
                                      const sc::InterruptRequest* request,
                                      sc::InterruptResponse* response) override {
    using type = sc::InterruptRequest;
    return unary(ctx, "Interrupt", *request, *response, session_use::create,
                 [&](session_state& session) -> maybe_error {
                   auto ids =
                       session.interrupt([&](const std::string& id, const operation_state& op) {
                         switch (request->interrupt_type()) {
                           case type::INTERRUPT_TYPE_ALL:
                             return true;
                           case type::INTERRUPT_TYPE_TAG:
                             return std::find(op.tags.begin(), op.tags.end(),
                                              request->operation_tag()) != op.tags.end();
                           case type::INTERRUPT_TYPE_OPERATION_ID:
                             return id == request->operation_id();
                           default:
                             return false;
                         }
                       });
                   for (const auto& id : ids) response->add_interrupted_ids(id);
                   return std::nullopt;
                 });
  }

  grpc::ServerUnaryReactor* ReleaseExecute(CallbackServerContext* ctx,
                                           const sc::ReleaseExecuteRequest* request,
                                           sc::ReleaseExecuteResponse* response) override {
    // Spark does not compare the observed server-side session id here.
    return unary(ctx, "ReleaseExecute", *request, *response, session_use::existing_unobserved,
                 [&](session_state& session) -> maybe_error {
                   std::optional<std::string> until;
                   if (request->has_release_until()) until = request->release_until().response_id();
                   session.release(request->operation_id(), request->has_release_all(), until);
                   response->set_operation_id(request->operation_id());
                   return std::nullopt;
                 });
  }

  grpc::ServerUnaryReactor* ReleaseSession(CallbackServerContext* ctx,
                                           const sc::ReleaseSessionRequest* request,
                                           sc::ReleaseSessionResponse* response) override {
    auto call = begin_call(*ctx, state_, "ReleaseSession");
    if (call.failure) return reply(ctx, *call.failure);
    // Releasing an unknown session is fine: there is nothing left to clean up.
    auto removed = state_.remove_session(key_of(*request), request->allow_reconnect());
    response->set_session_id(request->session_id());
    if (removed) response->set_server_side_session_id(*removed);
    return reply(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* FetchErrorDetails(CallbackServerContext* ctx,
                                              const sc::FetchErrorDetailsRequest* request,
                                              sc::FetchErrorDetailsResponse* response) override {
    return unary(ctx, "FetchErrorDetails", *request, *response, session_use::create,
                 [&](session_state&) -> maybe_error {
                   response->set_root_error_idx(0);
                   return std::nullopt;
                 });
  }

  grpc::ServerUnaryReactor* CloneSession(CallbackServerContext* ctx,
                                         const sc::CloneSessionRequest* request,
                                         sc::CloneSessionResponse* response) override {
    auto call = begin_call(*ctx, state_, "CloneSession");
    if (call.failure) return reply(ctx, *call.failure);
    const std::string new_session_id =
        request->new_session_id().empty() ? random_uuid() : request->new_session_id();
    std::string server_side_id, new_server_side_id;
    auto error = state_.clone_session(key_of(*request), observed(*request), new_session_id,
                                      server_side_id, new_server_side_id);
    if (error) return reply(ctx, to_status(state_, *error));
    response->set_session_id(request->session_id());
    response->set_server_side_session_id(server_side_id);
    response->set_new_session_id(new_session_id);
    response->set_new_server_side_session_id(new_server_side_id);
    return reply(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* GetStatus(CallbackServerContext* ctx,
                                      const sc::GetStatusRequest* request,
                                      sc::GetStatusResponse* response) override {
    return unary(ctx, "GetStatus", *request, *response, session_use::create,
                 [&](session_state& session) -> maybe_error {
                   auto add = [&](const std::string& id, const char* status) {
                     auto* entry = response->add_operation_statuses();
                     entry->set_operation_id(id);
                     entry->set_state(status);
                   };
                   const auto& wanted = request->operation_status().operation_ids();
                   if (wanted.empty()) {
                     for (const auto& [id, op] : session.ops) add(id, op.status());
                   }
                   for (const auto& id : wanted) {
                     auto op = session.ops.find(id);
                     add(id, op == session.ops.end() ? "unknown" : op->second.status());
                   }
                   return std::nullopt;
                 });
  }

 private:
  /// The shape shared by the unary RPCs: prologue, session lookup and ids, then `fill`
  /// under the state lock.
  template <class Request, class Response, class Fill>
  grpc::ServerUnaryReactor* unary(CallbackServerContext* ctx, const std::string& method,
                                  const Request& request, Response& response, session_use use,
                                  Fill fill) {
    auto call = begin_call(*ctx, state_, method);
    if (call.failure) return reply(ctx, *call.failure);
    ctx->AddInitialMetadata("x-fake-user", request.user_context().user_id());
    const auto seen = use == session_use::existing_unobserved ? std::nullopt : observed(request);
    auto error = state_.with_session(key_of(request), seen, use == session_use::create,
                                     [&](session_state& session) -> maybe_error {
                                       response.set_session_id(request.session_id());
                                       response.set_server_side_session_id(session.server_side_id);
                                       return fill(session);
                                     });
    return reply(ctx, error ? to_status(state_, *error) : grpc::Status::OK);
  }

  static void add_pair(sc::ConfigResponse& response, const std::string& key,
                       const std::string& value) {
    auto* pair = response.add_pairs();
    pair->set_key(key);
    pair->set_value(value);
  }

  fake_state& state_;
  delayed_executor& timer_;
  const options& defaults_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

// ------------------------------------------------------------------ server

struct fake_server::impl {
  explicit impl(options o)
      : opts(std::move(o)),
        state(opts.name, {opts.session_timeout_ms, opts.detached_timeout_ms}),
        service(state, timer, opts),
        echo(state) {
    state.set_required_token(opts.token);
  }

  options opts;
  fake_state state;
  delayed_executor timer;
  spark_service service;
  echo_service echo;
  std::unique_ptr<grpc::Server> server;  // last: destroyed before what its calls use
  std::once_flag shut_down;
};

fake_server::fake_server(options opts) : impl_(std::make_unique<impl>(std::move(opts))) {}

fake_server::~fake_server() { shutdown(std::chrono::milliseconds(500)); }

int fake_server::start() {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(impl_->opts.listen, grpc::InsecureServerCredentials(), &port);
  // gRPC's default SO_REUSEPORT would let a second emulator share a busy port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const int max_bytes =
      static_cast<int>(std::clamp<int64_t>(impl_->opts.max_message_bytes, 0, INT_MAX));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&impl_->service);
  builder.RegisterCallbackGenericService(&impl_->echo);
  impl_->server = builder.BuildAndStart();
  return impl_->server ? port : 0;
}

void fake_server::shutdown(std::chrono::milliseconds grace) {
  std::call_once(impl_->shut_down, [&] {
    if (!impl_->server) return;
    impl_->service.begin_shutdown();
    // Delayed streams must reach their next step to notice the shutdown.
    impl_->timer.fast_forward();
    impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  });
}

nlohmann::json fake_server::stats() const { return impl_->state.stats(); }

}  // namespace scg::fake
