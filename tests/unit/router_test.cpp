// The router actor in process, on CAF's deterministic scheduler: scripted
// owner replicas that answer, stay silent or answer late; a router that
// exits with calls pending; the routing deadline. No process, no network:
// time passes only when a test advances the actor clock.
//
// Built as its own executable, router_tests (CMakeLists.txt): it links the
// actors (scg_gateway), which unit_tests does not. It runs under Catch2 like
// the other unit tests. CAF's own test DSL (caf/test/dsl.hpp) brings its
// test engine, macros and main, which clash with Catch2's, so the fixture
// below does by hand what its test_coordinator_fixture does: a system on the
// "testing" scheduler policy, whose test_coordinator runs each message when
// told (sched.run()) and whose clock moves only in advance().
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/router_stats.hpp"
#include "core/metrics.hpp"
#include "core/replicated_key.hpp"

using namespace scg;
using namespace scg::actors;
using namespace std::chrono_literals;

namespace {

caf::actor_system_config& deterministic(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.inline-output", true);
  return cfg;
}

/// What a scripted peer router does when asked.
struct peer_script {
  std::string decides;        ///< decide's answer; empty: stays silent
  int silent_decides = 0;     ///< decides left unanswered first (a freeze)
  std::string lookup_answer;  ///< lookup's answer; empty: stays silent
  std::string where_op_answer;  ///< where_op's answer; empty: stays silent
  int asked = 0;              ///< decides asked
  std::vector<caf::response_promise> held;  ///< the answers it owes (never given unless a test does)
};

/// Tells a scripted peer to give the answers it owes, late.
using late_atom = caf::atom_constant<caf::atom("late")>;

/// A peer replica's router, as scripted: it answers, or keeps the promise
/// unanswered (the asker times out) until told to answer late.
caf::behavior scripted_peer(caf::event_based_actor* self, std::shared_ptr<peer_script> s) {
  const auto reply = [=](const std::string& answer) -> caf::result<std::string> {
    if (!answer.empty()) return answer;
    s->held.push_back(self->make_response_promise());
    return s->held.back();
  };
  return {
      [=](decide_atom, const std::string&) -> caf::result<std::string> {
        ++s->asked;
        if (s->silent_decides > 0) {
          --s->silent_decides;
          return reply({});
        }
        return reply(s->decides);
      },
      [=](decide_atom, const std::string&, const std::string& name) -> caf::result<std::string> { return name; },
      [=](lookup_atom, const std::string&) { return reply(s->lookup_answer); },
      [=](where_op_atom, const std::string&) { return reply(s->where_op_answer); },
      [=](late_atom, const std::string& name) {
        for (auto& promise : s->held) promise.deliver(name);
        s->held.clear();
      },
  };
}

/// This replica's cluster actor: it takes the router's writes.
caf::behavior fake_cluster(caf::event_based_actor*, std::shared_ptr<std::vector<std::string>> puts) {
  return {
      [=](put_atom, const std::string& key, const std::string& value, const std::string&, std::uint64_t) {
        puts->push_back(key + "=" + value);
      },
      [=](erase_atom, const std::string&) {},
      [=](release_atom, const std::string&) {},
      [=](backend_atom, const std::string&) {},
  };
}

std::uint64_t counter(std::atomic<std::uint64_t> router_stats::*c) { return (global_router_stats().*c).load(); }

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{deterministic(cfg)};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  backend_list backends;
  std::shared_ptr<session_table> table;
  /// What the replicated table holds (settings.replicated reads it).
  std::shared_ptr<std::map<std::string, std::string>> entries = std::make_shared<std::map<std::string, std::string>>();
  std::shared_ptr<std::vector<std::string>> puts = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<peer_script> owner = std::make_shared<peer_script>();
  caf::actor cluster, peer;
  router_actor router;
  /// Every answer each call heard, by call.
  std::vector<std::shared_ptr<std::vector<route_result>>> answers;

  explicit fixture(std::chrono::milliseconds route_deadline = 30s) {
    if (!spdlog::get("router")) spdlog::create<spdlog::sinks::null_sink_mt>("router");
    for (const char* name : {"b0", "b1", "b2"})
      backends.push_back(std::make_shared<backend_state>(name, std::string(name) + ":15002", ""));
    table = std::make_shared<session_table>(backends.size());
    router_settings s{};
    s.session_ttl_ms = 3600'000;
    s.op_ttl_ms = 600'000;
    s.node_name = "me";
    s.route_deadline = route_deadline;
    s.settle_ms = 0;
    s.replicated.backend = [e = entries](const std::string& key) {
      auto it = e->find(key);
      return it == e->end() ? std::string() : it->second;
    };
    s.replicated.released = [](const std::string&) { return false; };
    router = spawn_router(sys, s, table, backends);
    cluster = sys.spawn(fake_cluster, puts);
    peer = sys.spawn(scripted_peer, owner);
    sched.run();
  }

  ~fixture() {
    for (auto& a : {caf::actor_cast<caf::actor>(router), cluster, peer})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// The cluster actor tells the router its one peer, "p1", which owns every
  /// key (this replica's first sync is not over).
  void join_cluster(std::uint32_t peer_protocol = 4) {
    membership view;
    view.peers.push_back({"p1", peer, peer_protocol, true});
    caf::send_as(cluster, router, members_atom::value, view);
    sched.run();
  }

  /// A callback as the data path's, wrapped as actors::router does.
  route_answer_ptr call() {
    auto heard = std::make_shared<std::vector<route_result>>();
    answers.push_back(heard);
    return make_answer([heard](route_result r) { heard->push_back(std::move(r)); });
  }

  void advance(caf::timespan d) {
    sched.clock().advance_time(d);
    sched.run();
  }
};

std::string key_of(const std::string& session) { return session_key{"t", "u", session}.str(); }

}  // namespace

TEST_CASE("a backend back up is neither down nor lost, before its down_since_ms is cleared", "[router]") {
  scg::actors::backend_state b("b", "b:15002", "");
  CHECK(!scg::actors::down(b));
  b.healthy = false;
  b.down_since_ms = 1000;
  CHECK(scg::actors::down(b));
  CHECK(!scg::actors::lost(b, 1500, 1000));
  CHECK(scg::actors::lost(b, 2000, 1000));
  b.healthy = true;  // its probes answer again; the backend actor's next tick clears down_since_ms
  CHECK(!scg::actors::down(b));
  CHECK(!scg::actors::lost(b, 5000, 1000));
  b.reachable = false;
  CHECK(scg::actors::lost(b, 5000, 1000));
}

TEST_CASE("a route_answer answers exactly once, and shutting_down when dropped", "[router]") {
  std::vector<route_result> heard;
  auto record = [&](route_result r) { heard.push_back(std::move(r)); };
  {
    route_answer a(record);
    route_answer b(std::move(a));  // a moved-from answer owes nothing
    b(route_result{backend_index{1}, {}});
    b(route_result{backend_index{2}, {}});  // answered already: nothing
  }
  REQUIRE(heard.size() == 1);
  CHECK(heard[0].backend == backend_index{1});
  { route_answer dropped(record); }
  REQUIRE(heard.size() == 2);
  CHECK(!heard[1].backend);
  CHECK(heard[1].refusal == core::local_reason::shutting_down);
  { auto in_transit = make_answer(record); }  // a message dropped unread frees it
  CHECK(heard.size() == 3);
}

TEST_CASE("alone, the router places a new session and answers once", "[router]") {
  fixture f;
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  f.sched.run();
  REQUIRE(f.answers[0]->size() == 1);
  REQUIRE((*f.answers[0])[0].backend);
  CHECK(f.table->session_backend(key_of("s1")) == (*f.answers[0])[0].backend);
}

TEST_CASE("the key's owner decides, and its write is confirmed here when it has not arrived", "[router]") {
  const auto confirmed = counter(&router_stats::router_decisions_confirmed_total);
  fixture f;
  f.owner->decides = "b2";
  f.join_cluster();
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  caf::anon_send(f.router, bind_atom::value, key_of("s2"), f.call());
  f.sched.run();
  CHECK(f.owner->asked == 2);
  for (auto& heard : f.answers) {
    REQUIRE(heard->size() == 1);
    CHECK((*heard)[0].backend == backend_index{2});
  }
  CHECK(f.table->session_backend(key_of("s1")) == backend_index{2});
  // The owner's write of s2 arrives here in time; s1's does not: 200 ms on,
  // this replica writes s1's binding itself.
  (*f.entries)[core::make_key(core::key_kind::session, key_of("s2"))] = "b2";
  f.puts->clear();
  f.advance(200ms);
  CHECK(counter(&router_stats::router_decisions_confirmed_total) == confirmed + 1);
  REQUIRE(f.puts->size() == 1);
  CHECK((*f.puts)[0] == core::make_key(core::key_kind::session, key_of("s1")) + "=b2");
}

TEST_CASE("an owner that does not answer: this replica decides at the ask's time-out", "[router]") {
  const auto unreachable = counter(&router_stats::router_owner_unreachable_total);
  fixture f;
  f.join_cluster();  // the owner stays silent
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  f.sched.run();
  CHECK(f.answers[0]->empty());
  f.advance(999ms);
  CHECK(f.answers[0]->empty());
  f.advance(1ms);
  REQUIRE(f.answers[0]->size() == 1);
  REQUIRE((*f.answers[0])[0].backend);
  CHECK(counter(&router_stats::router_owner_unreachable_total) == unreachable + 1);
  CHECK(f.table->session_backend(key_of("s1")) == (*f.answers[0])[0].backend);
}

TEST_CASE("an owner's answer after the time-out changes nothing", "[router]") {
  fixture f;
  f.join_cluster();
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  f.sched.run();
  f.advance(1s);
  REQUIRE(f.answers[0]->size() == 1);
  const auto decided = (*f.answers[0])[0].backend;
  REQUIRE(decided);
  const auto other = f.backends[(*decided + 1) % f.backends.size()]->name;
  REQUIRE(f.owner->held.size() == 1);
  caf::anon_send(f.peer, late_atom::value, other);  // late: the ask is over
  f.sched.run();
  CHECK(f.answers[0]->size() == 1);
  CHECK(f.table->session_backend(key_of("s1")) == decided);
}

TEST_CASE("a replica frozen past the time-out asks the owner again", "[router]") {
  const auto asked_again = counter(&router_stats::router_owner_asked_again_total);
  const auto unreachable = counter(&router_stats::router_owner_unreachable_total);
  fixture f;
  f.owner->decides = "b1";
  f.owner->silent_decides = 1;  // the first ask goes unanswered
  f.join_cluster();
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  f.sched.run();
  // The time-out reaches the router 2 s after the ask, well past the 1 s it
  // was set for: this replica was frozen, so it asks again, once.
  f.advance(2s);
  CHECK(counter(&router_stats::router_owner_asked_again_total) == asked_again + 1);
  CHECK(counter(&router_stats::router_owner_unreachable_total) == unreachable);
  CHECK(f.owner->asked == 2);
  REQUIRE(f.answers[0]->size() == 1);
  CHECK((*f.answers[0])[0].backend == backend_index{1});
}

TEST_CASE("a held session's owner is asked for its binding, the peers for an operation id", "[router]") {
  const auto lookups = counter(&router_stats::router_owner_lookups_total);
  const auto found = counter(&router_stats::router_operations_found_total);
  fixture f;
  f.owner->lookup_answer = "b2";
  f.owner->where_op_answer = "b1";
  f.join_cluster();
  caf::anon_send(f.router, held_atom::value, key_of("s1"), holder_query{"s1", "u", "s1-server"}, f.call());
  caf::anon_send(f.router, op_find_atom::value, std::string("op1"), key_of("s2"), f.call());
  f.sched.run();
  REQUIRE(f.answers[0]->size() == 1);
  CHECK((*f.answers[0])[0].backend == backend_index{2});
  CHECK(counter(&router_stats::router_owner_lookups_total) == lookups + 1);
  REQUIRE(f.answers[1]->size() == 1);
  CHECK((*f.answers[1])[0].backend == backend_index{1});
  CHECK(counter(&router_stats::router_operations_found_total) == found + 1);
}

TEST_CASE("a router that exits with calls pending answers each once: shutting_down", "[router]") {
  fixture f;
  f.join_cluster();  // the owner answers nothing: decide, lookup and where_op all wait
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  caf::anon_send(f.router, held_atom::value, key_of("s2"), holder_query{"s2", "u", "s2-server"}, f.call());
  caf::anon_send(f.router, held_atom::value, key_of("s2"), holder_query{"s2", "u", "s2-server"}, f.call());
  caf::anon_send(f.router, op_find_atom::value, std::string("op1"), key_of("s3"), f.call());
  f.sched.run();
  for (auto& heard : f.answers) CHECK(heard->empty());
  caf::anon_send_exit(f.router, caf::exit_reason::user_shutdown);
  f.sched.run();
  // A call sent to the router once it is gone is answered too.
  caf::anon_send(f.router, rebind_atom::value, key_of("s4"), f.call());
  f.sched.run();
  f.advance(2s);  // the asks' time-outs: the router is gone, nobody answers again
  REQUIRE(f.answers.size() == 5);
  for (auto& heard : f.answers) {
    REQUIRE(heard->size() == 1);
    CHECK(!(*heard)[0].backend);
    CHECK((*heard)[0].refusal == core::local_reason::shutting_down);
  }
}

TEST_CASE("a call not answered within the routing deadline hears route_timeout, once", "[router]") {
  fixture f(500ms);  // shorter than the owner's ask (1 s), which the owner lets time out
  f.join_cluster();
  caf::anon_send(f.router, bind_atom::value, key_of("s1"), f.call());
  f.sched.run();
  f.advance(300ms);
  caf::anon_send(f.router, bind_atom::value, key_of("s2"), f.call());
  f.sched.run();
  f.advance(200ms);  // s1's deadline
  REQUIRE(f.answers[0]->size() == 1);
  CHECK(!(*f.answers[0])[0].backend);
  CHECK((*f.answers[0])[0].refusal == core::local_reason::route_timeout);
  CHECK(f.answers[1]->empty());
  f.advance(300ms);  // s2's
  REQUIRE(f.answers[1]->size() == 1);
  CHECK((*f.answers[1])[0].refusal == core::local_reason::route_timeout);
  // The asks time out and this replica decides: bound, but nobody is told twice.
  f.advance(500ms);
  CHECK(f.answers[0]->size() == 1);
  CHECK(f.answers[1]->size() == 1);
  CHECK(f.table->session_backend(key_of("s1")).has_value());
  CHECK(f.table->session_backend(key_of("s2")).has_value());
  CHECK(core::reply_of(core::local_reason::route_timeout).code == core::grpc_code::unavailable);
}
