// Running a session's journal on its new server: one call at a time, each
// started from the previous one's completion (gRPC's callback threads).
#include "net/replayer.hpp"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <memory>

#include "core/protowire.hpp"
#include "net/artifact_spool.hpp"
#include "net/wire.hpp"

namespace scg::net {

namespace {

const std::string config_method = "/spark.connect.SparkConnectService/Config";
const std::string execute_method = "/spark.connect.SparkConnectService/ExecutePlan";
const std::string artifacts_method = "/spark.connect.SparkConnectService/AddArtifacts";

std::string flat(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

/// ConfigRequest{session_id, user_context{user_id}, operation{get_option{}}}:
/// creates the session where it is new, changes nothing, and is answered
/// with the server-side session id.
std::string open_request(const std::string& session, const std::string& user) {
  namespace pw = core::protowire;
  std::string user_context, operation, out;
  pw::put_bytes(user_context, 1, user);
  pw::put_bytes(operation, 4, "");
  pw::put_bytes(out, 1, session);
  pw::put_bytes(out, 2, user_context);
  pw::put_bytes(out, 3, operation);
  return out;
}

/// An ExecutePlan sent whole, its responses read and dropped; `done` gets the status.
class plan_call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  plan_call(const std::string& request, std::function<void(grpc::Status)> done)
      : request_(buffer_of(request)), done_(std::move(done)) {}
  grpc::ClientContext& context() { return ctx_; }
  void start(grpc::GenericStub& stub) {
    stub.PrepareBidiStreamingCall(&ctx_, execute_method, grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&response_);
  }
  void OnDone(const grpc::Status& s) override {
    auto done = std::move(done_);
    delete this;
    done(s);
  }

 private:
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_, response_;
  std::function<void(grpc::Status)> done_;
};

/// A spooled AddArtifacts call sent again, one message at a time from its
/// file; `done` gets the status, or what its answer or file says is wrong.
class upload_call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  upload_call(const spooled_call& spooled, std::function<void(grpc::Status)> done)
      : file_(spooled.path()), done_(std::move(done)) {}
  grpc::ClientContext& context() { return ctx_; }
  void start(grpc::GenericStub& stub) {
    stub.PrepareBidiStreamingCall(&ctx_, artifacts_method, grpc::StubOptions(), this);
    StartRead(&response_);
    write_next();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) write_next();
  }
  void OnReadDone(bool ok) override {
    if (ok) answer_ = flat(response_);
  }
  void OnDone(const grpc::Status& s) override {
    auto done = std::move(done_);
    auto status = s;
    if (s.ok() && !problem_.empty()) status = grpc::Status(grpc::StatusCode::DATA_LOSS, problem_);
    if (status.ok()) status = check_answer();
    delete this;
    done(status);
  }

 private:
  void write_next() {
    std::string message;
    if (!file_.next(message)) {
      if (!file_.error().empty()) problem_ = "the spool: " + file_.error();
      StartWritesDone();
      return;
    }
    next_ = buffer_of(message);
    StartWrite(&next_);
  }
  /// AddArtifactsResponse.artifacts (1): each ArtifactSummary's is_crc_successful (2).
  grpc::Status check_answer() const {
    namespace pw = core::protowire;
    std::string_view in = answer_;
    pw::field f;
    while (pw::next(in, f)) {
      if (f.number != 1 || f.type != 2) continue;
      std::string_view summary = f.payload, name;
      bool crc_ok = false;
      pw::field g;
      while (pw::next(summary, g)) {
        if (g.number == 1 && g.type == 2) name = g.payload;
        if (g.number == 2 && g.type == 0) crc_ok = g.varint != 0;
      }
      if (!crc_ok)
        return grpc::Status(grpc::StatusCode::DATA_LOSS, "the server found artifact " + std::string(name) +
                                                             " damaged (is_crc_successful false)");
    }
    return grpc::Status::OK;
  }

  grpc::ClientContext ctx_;
  artifact_spool::reader file_;
  grpc::ByteBuffer next_, response_;
  std::string answer_, problem_;
  std::function<void(grpc::Status)> done_;
};

/// One replay under way: the entries left, what came of those run.
struct replay : std::enable_shared_from_this<replay> {
  actors::backend_state& backend;
  replay_request req;
  std::function<void(replay_outcome)> done;
  replay_outcome outcome;
  std::size_t next = 0;

  replay(actors::backend_state& b, replay_request r, std::function<void(replay_outcome)> d)
      : backend(b), req(std::move(r)), done(std::move(d)) {}

  void prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + req.per_call);
    if (!req.token.empty()) ctx.AddMetadata("authorization", "Bearer " + req.token);
  }

  void open() {
    struct call {
      grpc::ClientContext ctx;
      grpc::ByteBuffer request, response;
    };
    auto c = std::make_shared<call>();
    c->request = buffer_of(open_request(req.session_id, req.user_id));
    prepare(c->ctx);
    backend.stub->UnaryCall(&c->ctx, config_method, grpc::StubOptions(), &c->request, &c->response,
                            [self = shared_from_this(), c](grpc::Status s) {
                              if (!s.ok()) return self->fail("opening the session: " + s.error_message());
                              const auto body = flat(c->response);
                              const segments segs{{reinterpret_cast<const std::uint8_t*>(body.data()), body.size()}};
                              response_fields f;
                              if (!scan_response(rpc::config, segs, f) || f.server_side_session_id.empty())
                                return self->fail("opening the session: the server named no server-side session id");
                              self->outcome.server_id = f.server_side_session_id;
                              self->step();
                            });
  }

  void step() {
    if (next == req.entries.size()) {
      outcome.ok = true;
      return done(std::move(outcome));
    }
    const auto& e = req.entries[next];
    auto after = [self = shared_from_this()](grpc::Status s) { self->on_entry(s); };
    if (e.kind == rpc::config) {
      struct call {
        grpc::ClientContext ctx;
        grpc::ByteBuffer request, response;
      };
      auto c = std::make_shared<call>();
      c->request = buffer_of(e.request);
      prepare(c->ctx);
      backend.stub->UnaryCall(&c->ctx, config_method, grpc::StubOptions(), &c->request, &c->response,
                              [c, after](grpc::Status s) { after(s); });
      return;
    }
    if (e.kind == rpc::add_artifacts) {
      if (!e.spooled) return after(grpc::Status(grpc::StatusCode::INTERNAL, "its spooled messages are gone"));
      auto* call = new upload_call(*e.spooled, after);
      prepare(call->context());
      return call->start(*backend.stub);
    }
    auto* call = new plan_call(e.request, after);
    prepare(call->context());
    call->start(*backend.stub);
  }

  void on_entry(const grpc::Status& s) {
    const auto& e = req.entries[next++];
    if (!s.ok()) {
      const auto why = describe(e) + ": " + s.error_message().substr(0, 300);
      if (!e.optional) return fail(why);
      outcome.skipped.push_back(why);
    } else {
      ++outcome.replayed;
    }
    step();
  }

  void fail(const std::string& why) {
    outcome.ok = false;
    outcome.failed = why;
    done(std::move(outcome));
  }
};

}  // namespace

std::string describe(const journal_entry& e) {
  std::string out(rpc_name(e.kind));
  for (const auto& n : e.names) out += " " + n;
  return out;
}

void replay_journal(actors::backend_state& backend, replay_request request, std::function<void(replay_outcome)> done) {
  // Artifacts first: a view or function may need them (a cached local relation, a module).
  std::stable_partition(request.entries.begin(), request.entries.end(),
                        [](const journal_entry& e) { return e.kind == rpc::add_artifacts; });
  std::make_shared<replay>(backend, std::move(request), std::move(done))->open();
}

}  // namespace scg::net
