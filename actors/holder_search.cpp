#include "actors/holder_search.hpp"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "core/protowire.hpp"
#include "core/ids.hpp"

namespace scg::actors {

void find_holder(const backend_list& backends, const std::vector<backend_index>& candidates,
                 const holder_query& q, const std::string& token, int timeout_ms,
                 std::function<void(std::optional<backend_index>)> done) {
  if (candidates.empty()) return done(std::nullopt);
  struct search {
    std::function<void(std::optional<backend_index>)> done;
    std::atomic<std::size_t> pending;
    std::atomic<bool> answered{false};
    void answer(std::optional<backend_index> b) {
      if (!answered.exchange(true)) done(b);
    }
  };
  auto s = std::make_shared<search>();
  s->done = std::move(done);
  s->pending = candidates.size();
  // One random operation id: no server runs it, so a holder answers OPERATION_NOT_FOUND.
  const std::string request = holder_request(q, core::new_uuid());
  for (auto i : candidates) {
    struct call {
      grpc::ClientContext ctx;
      grpc::ByteBuffer request, response;
    };
    auto* c = new call;
    grpc::Slice slice(request);
    c->request = grpc::ByteBuffer(&slice, 1);
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!token.empty()) c->ctx.AddMetadata("authorization", "Bearer " + token);
    // A server-streaming method called as unary: the server answers a status, no message.
    backends[i]->stub->UnaryCall(&c->ctx, "/spark.connect.SparkConnectService/ReattachExecute", grpc::StubOptions(),
                                 &c->request, &c->response, [c, s, i](grpc::Status st) {
                                   if (classify_holder_answer(st.error_code(), st.error_message()) ==
                                       holder_answer::holds)
                                     s->answer(i);
                                   if (--s->pending == 0) s->answer(std::nullopt);
                                   delete c;
                                 });
  }
}

}  // namespace scg::actors
