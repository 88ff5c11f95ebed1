// The backend decision of one call (net/choose_backend.hpp): each outcome,
// and which lookups it makes to get there.
#include <catch2/catch.hpp>

#include "net/choose_backend.hpp"

using namespace scg::net;
using scg::core::local_reason;

namespace {

/// A routing table of fixed answers that counts what it was asked.
struct fixed_table final : route_lookup {
  std::optional<binding> op, sess;
  int op_asked = 0, session_asked = 0;
  std::optional<binding> operation() override {
    ++op_asked;
    return op;
  }
  std::optional<binding> session() override {
    ++session_asked;
    return sess;
  }
};

request_fields with_session(std::string op = "") {
  request_fields f;
  f.session_id = "s-1";
  f.user_id = "alice";
  f.operation_id = std::move(op);
  return f;
}

constexpr std::size_t three = 3;
constexpr auto rebind = scg::config::lost_action::rebind;
constexpr auto fail = scg::config::lost_action::fail;
constexpr auto replay = scg::config::lost_action::replay;

}  // namespace

TEST_CASE("Reattach and ReleaseExecute go to their operation's backend, before the session's", "[choose_backend]") {
  for (auto kind : {rpc::reattach_execute, rpc::release_execute}) {
    fixed_table t;
    t.op = binding{2, false};
    t.sess = binding{1, false};
    auto d = choose_backend(kind, with_session("op-1"), three, rebind, t);
    CHECK(d.action == route_action::use);
    CHECK(d.backend == 2);
    CHECK(t.op_asked == 1);
    CHECK(t.session_asked == 0);  // the session table is not read (nor refreshed)
  }
}

TEST_CASE("an Interrupt follows its operation only when it interrupts one operation", "[choose_backend]") {
  fixed_table t;
  t.op = binding{2, false};
  t.sess = binding{1, false};
  auto f = with_session("op-1");
  f.interrupt_type = 3;  // INTERRUPT_TYPE_OPERATION_ID
  CHECK(follows_operation(rpc::interrupt, f));
  CHECK(choose_backend(rpc::interrupt, f, three, rebind, t).backend == 2);

  f.interrupt_type = 1;  // INTERRUPT_TYPE_ALL: the session's backend
  CHECK_FALSE(follows_operation(rpc::interrupt, f));
  fixed_table u = t;
  u.op_asked = 0;
  auto d = choose_backend(rpc::interrupt, f, three, rebind, u);
  CHECK(d.action == route_action::use);
  CHECK(d.backend == 1);
  CHECK(u.op_asked == 0);
}

TEST_CASE("an ExecutePlan with its own operation id, or a Reattach without one, routes by session", "[choose_backend]") {
  fixed_table t;
  t.op = binding{2, false};
  t.sess = binding{1, false};
  CHECK_FALSE(follows_operation(rpc::execute_plan, with_session("op-1")));
  CHECK(choose_backend(rpc::execute_plan, with_session("op-1"), three, rebind, t).backend == 1);
  CHECK_FALSE(follows_operation(rpc::reattach_execute, with_session()));
  CHECK(choose_backend(rpc::reattach_execute, with_session(), three, rebind, t).backend == 1);
  CHECK(t.op_asked == 0);
}

TEST_CASE("an operation whose backend is lost, or that the index lacks, falls back to its session", "[choose_backend]") {
  fixed_table t;
  t.op = binding{2, true};
  t.sess = binding{1, false};
  auto d = choose_backend(rpc::reattach_execute, with_session("op-1"), three, rebind, t);
  CHECK(d.action == route_action::use);
  CHECK(d.backend == 1);
  CHECK(t.op_asked == 1);
  CHECK(t.session_asked == 1);

  // One the index lacks: the cluster is asked first (below), then the session.
  t.op.reset();
  CHECK(choose_backend(rpc::release_execute, with_session("op-1"), three, rebind, t, true).backend == 1);
}

TEST_CASE("an operation id the index lacks is resolved in the cluster before its session is read", "[choose_backend]") {
  for (auto kind : {rpc::reattach_execute, rpc::release_execute}) {
    INFO(rpc_name(kind));
    fixed_table t;
    t.sess = binding{1, false};  // even a bound session waits: it may be a new id on another backend
    auto d = choose_backend(kind, with_session("op-1"), three, rebind, t);
    CHECK(d.action == route_action::resolve_op);
    CHECK(t.session_asked == 0);
    // Nobody knew it: routed by session.
    d = choose_backend(kind, with_session("op-1"), three, rebind, t, true);
    CHECK(d.action == route_action::use);
    CHECK(d.backend == 1);
    t.sess.reset();  // and a session nobody holds is looked for, not placed
    CHECK(choose_backend(kind, with_session("op-1"), three, rebind, t, true).action == route_action::resolve_held);
  }
  // A lost operation is not asked for again: it died with its backend.
  fixed_table t;
  t.op = binding{2, true};
  CHECK(choose_backend(rpc::reattach_execute, with_session("op-1"), three, rebind, t).action == route_action::resolve_held);
}

TEST_CASE("a call without a session id goes to any backend", "[choose_backend]") {
  fixed_table t;
  t.sess = binding{1, false};
  request_fields f;
  auto d = choose_backend(rpc::config, f, three, rebind, t);
  CHECK(d.action == route_action::any);
  CHECK(t.session_asked == 0);
}

TEST_CASE("with no backend configured a call is refused no_backend, after its operation's binding", "[choose_backend]") {
  fixed_table t;
  auto d = choose_backend(rpc::execute_plan, with_session(), 0, rebind, t);
  CHECK(d.action == route_action::refuse);
  CHECK(d.refusal == local_reason::no_backend);
  CHECK(t.session_asked == 0);
  d = choose_backend(rpc::config, request_fields{}, 0, rebind, t);
  CHECK(d.action == route_action::refuse);
  CHECK(d.refusal == local_reason::no_backend);
  // The operation index is read first, as it always was.
  t.op = binding{0, false};
  d = choose_backend(rpc::reattach_execute, with_session("op-1"), 0, rebind, t);
  CHECK(d.action == route_action::use);
  CHECK(t.op_asked == 1);
}

TEST_CASE("a bound session goes to its backend", "[choose_backend]") {
  fixed_table t;
  t.sess = binding{1, false};
  auto d = choose_backend(rpc::analyze_plan, with_session(), three, rebind, t);
  CHECK(d.action == route_action::use);
  CHECK(d.backend == 1);
  CHECK(t.op_asked == 0);
  CHECK(t.session_asked == 1);
}

TEST_CASE("a session whose backend is lost is rebound, or refused backend_lost", "[choose_backend]") {
  fixed_table t;
  t.sess = binding{1, true};
  auto d = choose_backend(rpc::execute_plan, with_session(), three, rebind, t);
  CHECK(d.action == route_action::rebind);
  CHECK(d.backend == 1);

  d = choose_backend(rpc::execute_plan, with_session(), three, fail, t);  // on_backend_lost.action: fail
  CHECK(d.action == route_action::refuse);
  CHECK(d.refusal == local_reason::backend_lost);
  CHECK(d.backend == 1);  // named in the refusal
}

TEST_CASE("an unbound session asks the router for a new one", "[choose_backend]") {
  fixed_table t;
  for (auto kind : {rpc::execute_plan, rpc::analyze_plan, rpc::config, rpc::interrupt, rpc::unknown}) {
    INFO(rpc_name(kind));
    CHECK(choose_backend(kind, with_session(), three, rebind, t).action == route_action::resolve);
  }
}

TEST_CASE("an unbound session a server may still hold asks the router to look for it", "[choose_backend]") {
  fixed_table t;
  auto f = with_session();
  f.observed_server_session = "server-side-1";
  CHECK(choose_backend(rpc::execute_plan, f, three, rebind, t).action == route_action::resolve_held);
  // The RPCs that never create a session, with or without the observed id.
  for (auto kind : {rpc::reattach_execute, rpc::release_execute, rpc::release_session}) {
    INFO(rpc_name(kind));
    CHECK(choose_backend(kind, with_session(), three, rebind, t).action == route_action::resolve_held);
    CHECK(choose_backend(kind, with_session("op-1"), three, rebind, t, true).action == route_action::resolve_held);
  }
}

TEST_CASE("With replay, a lost session is replayed, a down one waits, a lost operation is refused naming it",
          "[choose_backend]") {
  fixed_table t;
  t.sess = binding{1, true, true};
  auto d = choose_backend(rpc::execute_plan, with_session(), three, replay, t);
  CHECK(d.action == route_action::replay);
  CHECK(d.backend == 1);
  t.sess = binding{1, false, true};  // down, not yet lost
  CHECK(choose_backend(rpc::config, with_session(), three, replay, t).action == route_action::wait);
  CHECK(choose_backend(rpc::config, with_session(), three, rebind, t).action == route_action::use);
  t.sess = binding{1, false, false};
  CHECK(choose_backend(rpc::config, with_session(), three, replay, t).action == route_action::use);

  // The operation's backend: down waits, lost is refused (it died there), fine is used.
  t.op = binding{2, false, true};
  CHECK(choose_backend(rpc::reattach_execute, with_session("op-1"), three, replay, t).action == route_action::wait);
  t.op = binding{2, true, true};
  d = choose_backend(rpc::reattach_execute, with_session("op-1"), three, replay, t);
  CHECK(d.action == route_action::refuse);
  CHECK(d.refusal == local_reason::operation_lost);
  CHECK(d.backend == 2);
  // Without replay it is routed by its session, as before.
  CHECK(choose_backend(rpc::reattach_execute, with_session("op-1"), three, rebind, t).action == route_action::use);
}
