// The nemesis checker (tests/nemesis/checker.hpp) on made-up histories: a
// clean one passes, each violation is counted and fails the run, and what a
// fault allows is counted apart.
#include <catch2/catch.hpp>

#include <sstream>

#include "tests/nemesis/checker.hpp"

using namespace scg::nemesis;

namespace {

call make(std::int64_t t, const std::string& replica, const std::string& rpc, const std::string& session,
          const std::string& backend, int code = 0, const std::string& op = "", const std::string& message = "") {
  call c;
  c.start_ms = t;
  c.end_ms = t + 10;
  c.replica = replica;
  c.rpc = rpc;
  c.session = session;
  c.backend = backend;
  c.code = code;
  c.op = op;
  c.by_op = rpc == "reattach" || rpc == "release_execute";
  c.message = message;
  return c;
}

/// Two sessions, an operation reattached under a new session id, a clone,
/// a release, every replica agreeing at the end.
history clean() {
  history h;
  h.seed = 7;
  h.calls = {make(0, "scg-0", "config", "s1", "fake-a"),
             make(20, "scg-1", "execute", "s1", "fake-a", 0, "op1"),
             make(40, "scg-2", "reattach", "r-1", "fake-a", 0, "op1"),
             make(60, "scg-1", "release_execute", "r-2", "fake-a", 0, "op1"),
             make(80, "scg-2", "analyze", "s2", "fake-b"),
             make(90, "scg-0", "config", "s2", "fake-b")};
  auto probe = make(45, "scg-0", "reattach", "p-1", "fake-a", 13, "op1", "[INVALID_HANDLE.SESSION_NOT_FOUND] x");
  probe.probe = true;
  h.calls.push_back(probe);
  auto clone = make(100, "scg-0", "clone", "s1", "fake-a");
  clone.new_session = "s3";
  h.calls.push_back(clone);
  h.calls.push_back(make(120, "scg-2", "config", "s3", "fake-a"));
  h.calls.push_back(make(130, "scg-2", "release_session", "s2", "fake-b"));
  for (const char* r : {"scg-0", "scg-1", "scg-2"}) {
    h.finals.push_back({"s1", r, "fake-a"});
    h.finals.push_back({"s3", r, "fake-a"});
    h.finals.push_back({"s2", r, ""});  // released
  }
  h.heals.push_back({5000, 180});
  return h;
}

}  // namespace

TEST_CASE("a clean history has no violations", "[nemesis]") {
  auto r = check(clean());
  CHECK(r.violations() == 0);
  CHECK(r.calls == 10);
  CHECK(r.ok_calls == 10);
  CHECK(r.sessions == 3);
  CHECK(r.operations == 1);
  CHECK(r.convergence_percentile(99) == 180);
}

TEST_CASE("the history round-trips through its file", "[nemesis]") {
  auto h = clean();
  h.faults.push_back({"split", 1000, 5000, {"scg-0"}});
  std::stringstream file;
  write_history(h, file);
  history back;
  std::string error;
  REQUIRE(read_history(file, back, &error));
  CHECK(back.seed == 7);
  CHECK(back.calls.size() == h.calls.size());
  CHECK(back.calls[7].new_session == "s3");
  CHECK(back.calls[3].probe);  // in the order the calls started
  CHECK(back.calls[2].by_op);
  CHECK(back.faults.at(0).targets == std::vector<std::string>{"scg-0"});
  CHECK(back.finals.size() == h.finals.size());
  CHECK(check(back).violations() == 0);
  std::stringstream bad("{\"t\":\"call\",\"start\":1}\n");
  history none;
  CHECK_FALSE(read_history(bad, none, &error));
  CHECK(error.find("line 1") != std::string::npos);
}

TEST_CASE("a session served by two backends outside any fault is a session change", "[nemesis]") {
  auto h = clean();
  h.calls.push_back(make(200, "scg-1", "config", "s1", "fake-c"));
  auto r = check(h);
  CHECK(r.session_changes == 1);
  CHECK(r.violations() == 1);
  // SESSION_CHANGED from the backend counts too.
  h = clean();
  h.calls.push_back(make(200, "scg-1", "analyze", "s1", "fake-a", 13, "",
                         "[INVALID_HANDLE.SESSION_CHANGED] The existing Spark server driver instance has restarted."));
  CHECK(check(h).session_changes == 1);
}

TEST_CASE("a session first bound during a partition may change: allowed, counted", "[nemesis]") {
  auto h = clean();
  h.faults.push_back({"split", 150, 3000, {"scg-0"}});
  h.calls.push_back(make(1000, "scg-0", "config", "p1", "fake-a"));
  h.calls.push_back(make(1100, "scg-1", "config", "p1", "fake-b"));
  h.calls.push_back(make(4000, "scg-0", "config", "p1", "fake-b"));
  auto r = check(h);
  CHECK(r.violations() == 0);
  CHECK(r.allowed_disagreements + r.allowed_session_changes == 1);
}

TEST_CASE("an operation reaching a second backend is a misroute unless its replica was cut off", "[nemesis]") {
  auto h = clean();
  h.calls.push_back(make(300, "scg-0", "reattach", "r-9", "fake-c", 13, "op1",
                         "[INVALID_HANDLE.SESSION_NOT_FOUND] no session"));
  auto r = check(h);
  CHECK(r.op_misroutes == 1);
  CHECK(r.unexpected_failures == 1);  // the wrong backend's answer
  // The replica that started it was killed as it started: allowed.
  h.faults.push_back({"kill", 25, 2000, {"scg-1"}});
  r = check(h);
  CHECK(r.op_misroutes == 0);
  CHECK(r.allowed_op_misroutes == 1);
  CHECK(r.unexpected_failures == 0);
  // Killed long after the start (the entry had replicated): a misroute again.
  h.faults.back() = {"kill", 250, 2000, {"scg-1"}};
  CHECK(check(h).op_misroutes == 1);
  // A partition between the two replicas begun as it started: allowed.
  h.faults.back() = {"partition", 22, 2000, {"scg-0"}};
  CHECK(check(h).op_misroutes == 0);
  // ... or one under way when it started (the other side cannot learn of it) ...
  h.faults.back() = {"partition", 5, 2000, {"scg-0"}};
  CHECK(check(h).op_misroutes == 0);
  // ... but not one that left both on the same side, or had healed long before.
  h.faults.back() = {"partition", 22, 2000, {"scg-2"}};
  CHECK(check(h).op_misroutes == 1);
  h.faults.back() = {"partition", -9000, -5000, {"scg-0"}};
  CHECK(check(h).op_misroutes == 1);
  // The replica it reached was thawed a moment before: not linked again yet.
  h.faults.back() = {"freeze", -2000, 0, {"scg-0"}};
  CHECK(check(h).op_misroutes == 0);
  // ... but long enough before for its links to be up again.
  h.faults.back() = {"freeze", -9000, -5000, {"scg-0"}};
  CHECK(check(h).op_misroutes == 1);
}

TEST_CASE("a binding missing from a live replica at the end is lost", "[nemesis]") {
  auto h = clean();
  h.finals[0].backend = "";
  auto r = check(h);
  CHECK(r.lost_bindings == 1);
  CHECK(r.violations() == 1);
}

TEST_CASE("a table that names another backend than the session's last call is a session change", "[nemesis]") {
  auto h = clean();
  for (auto& f : h.finals)
    if (f.session == "s3") f.backend = "fake-c";
  auto r = check(h);
  CHECK(r.session_changes == 1);
  CHECK(r.final_disagreements == 0);
}

TEST_CASE("replicas naming different backends at the end disagree", "[nemesis]") {
  auto h = clean();
  h.finals[3].backend = "fake-b";  // s1 at scg-1
  auto r = check(h);
  CHECK(r.final_disagreements == 1);
  CHECK(r.violations() >= 1);
}

TEST_CASE("two replicas answering a new session's first calls with two backends disagree", "[nemesis]") {
  auto h = clean();
  h.calls.push_back(make(500, "scg-0", "config", "race", "fake-a"));
  h.calls.push_back(make(500, "scg-1", "config", "race", "fake-b"));
  auto r = check(h);
  CHECK(r.new_session_disagreements == 1);
  CHECK(r.session_changes == 0);
  CHECK(r.violations() == 1);
}

TEST_CASE("a failure is allowed only with a documented status under a fault that explains it", "[nemesis]") {
  auto h = clean();
  h.calls.push_back(make(700, "scg-2", "config", "s1", "", 14, "", "failed to connect"));
  auto r = check(h);
  CHECK(r.unexpected_failures == 1);  // no fault: a violation
  h.faults.push_back({"kill", 600, 800, {"scg-2"}});
  r = check(h);
  CHECK(r.unexpected_failures == 0);
  CHECK(r.allowed_failures == 1);
  CHECK(r.failures_by_status["14"] == 1);
  // A status no fault explains, even under one.
  h.calls.push_back(make(710, "scg-2", "config", "s1", "", 8, "", "scg: rate limit"));
  CHECK(check(h).unexpected_failures == 1);
  // A backend kill explains UNAVAILABLE naming it, and a forgotten operation after it.
  h = clean();
  h.faults.push_back({"backend_kill", 50, 900, {"fake-a"}});
  h.calls.push_back(make(300, "scg-0", "config", "s1", "", 14, "", "scg: backend fake-a (127.0.0.1:1) unreachable"));
  h.calls.push_back(make(1500, "scg-0", "reattach", "r-5", "fake-a", 13, "op1",
                         "[INVALID_HANDLE.OPERATION_NOT_FOUND] gone"));
  r = check(h);
  CHECK(r.unexpected_failures == 0);
  CHECK(r.allowed_failures == 2);
}

TEST_CASE("an unknown operation refused while the cluster settles is allowed only near a membership fault",
          "[nemesis]") {
  const std::string refusal = "operation op9 is not known to any replica heard from while the cluster membership "
                              "settles; retry";
  auto h = clean();
  h.calls.push_back(make(20000, "scg-1", "reattach", "p-9", "", 14, "op9", refusal));
  h.calls.push_back(make(1000, "scg-1", "reattach", "p-8", "", 14, "op8", refusal));  // the run's first seconds
  auto r = check(h);
  CHECK(r.unexpected_failures == 1);  // at 20 s no fault explains it
  h.faults.push_back({"backend_kill", 19000, 19500, {"fake-a"}});
  CHECK(check(h).unexpected_failures == 1);  // a backend's fault changes no membership
  h.faults.push_back({"freeze", 14000, 16000, {"scg-0"}});  // thawed 4 s before: still settling
  r = check(h);
  CHECK(r.unexpected_failures == 0);
  CHECK(r.allowed_failures == 2);
  // Another UNAVAILABLE on a replica no fault touched is still a violation.
  h.calls.push_back(make(20100, "scg-1", "config", "s1", "", 14, "", "failed to connect"));
  CHECK(check(h).unexpected_failures == 1);
}

TEST_CASE("a heal after which the replicas do not agree in time fails the run", "[nemesis]") {
  auto h = clean();
  h.heals.push_back({9000, -1});
  h.heals.push_back({12000, 400});
  auto r = check(h);
  CHECK(r.unconverged_heals == 1);
  CHECK(r.convergence_percentile(99) == 400);
  CHECK(r.convergence_percentile(50) == 180);
  std::ostringstream out;
  print_report(r, out);
  CHECK(out.str().find("unconverged_heals=1\n") != std::string::npos);
  CHECK(out.str().find("violations=1\n") != std::string::npos);
}

TEST_CASE("a session's forgotten handle is allowed only when its backend restarted after the session's first call",
          "[nemesis]") {
  // s9 is made on fake-a at 1000 ms; a clone of it at 2000 ms finds fake-a without it.
  auto h = clean();
  h.calls.push_back(make(1000, "scg-0", "config", "s9", "fake-a"));
  h.calls.push_back(make(2000, "scg-1", "clone", "s9", "fake-a", 13, "", "[INVALID_HANDLE.SESSION_NOT_FOUND] gone"));
  h.faults.push_back({"backend_kill", 1500, 1800, {"fake-a"}});  // after the session's first call: its state is gone
  auto r = check(h);
  CHECK(r.violations() == 0);
  CHECK(r.allowed_failures == 1);
  CHECK(r.failures_by_status["13 INVALID_HANDLE.SESSION_NOT_FOUND"] == 1);
  // Killed before the session's first call: the backend made it after its restart, and lost it for no reason.
  h.faults.back() = {"backend_kill", 500, 800, {"fake-a"}};
  r = check(h);
  CHECK(r.unexpected_failures == 1);
  CHECK(r.allowed_failures == 0);
  // Another backend restarted: it explains nothing of fake-a's.
  h.faults.back() = {"backend_kill", 1500, 1800, {"fake-b"}};
  CHECK(check(h).unexpected_failures == 1);
}

TEST_CASE("SESSION_NOT_FOUND is allowed for a session a partition let two backends bind, not for one bound once",
          "[nemesis]") {
  // p1's first call reaches fake-a through scg-0, cut off; a clone of it
  // through scg-1, on the other side, reaches fake-b, which never had it.
  auto h = clean();
  h.faults.push_back({"partition", 800, 3000, {"scg-0"}});
  h.calls.push_back(make(1000, "scg-0", "config", "p1", "fake-a"));
  h.calls.push_back(make(1100, "scg-1", "clone", "p1", "fake-b", 13, "", "[INVALID_HANDLE.SESSION_NOT_FOUND] p1"));
  auto r = check(h);
  CHECK(r.violations() == 0);
  CHECK(r.allowed_disagreements == 1);
  CHECK(r.allowed_failures == 1);
  // The same answer for a session bound once during the partition: no second
  // binding explains it, whichever replica it went through.
  h = clean();
  h.faults.push_back({"partition", 800, 3000, {"scg-0"}});
  h.calls.push_back(make(1000, "scg-0", "config", "p2", "fake-a"));
  h.calls.push_back(make(1100, "scg-0", "clone", "p2", "fake-a", 13, "", "[INVALID_HANDLE.SESSION_NOT_FOUND] p2"));
  r = check(h);
  CHECK(r.unexpected_failures == 1);
  CHECK(r.allowed_disagreements + r.allowed_session_changes == 0);
  // And two backends outside any fault: a disagreement, and the failure too.
  h = clean();
  h.calls.push_back(make(5000, "scg-0", "config", "p3", "fake-a"));
  h.calls.push_back(make(5100, "scg-1", "clone", "p3", "fake-b", 13, "", "[INVALID_HANDLE.SESSION_NOT_FOUND] p3"));
  r = check(h);
  CHECK(r.new_session_disagreements == 1);
  CHECK(r.unexpected_failures == 1);
}

TEST_CASE("SESSION_CLOSED is allowed after a release of the session that the client saw fail, not before one",
          "[nemesis]") {
  // The release goes through scg-1 as it is killed: the client sees
  // UNAVAILABLE, keeps s1, but the backend closed it.
  auto h = clean();
  h.faults.push_back({"kill", 400, 700, {"scg-1"}});
  h.calls.push_back(make(500, "scg-1", "release_session", "s1", "", 14, "", "failed to connect"));
  h.calls.push_back(make(900, "scg-0", "config", "s1", "fake-a", 13, "", "[INVALID_HANDLE.SESSION_CLOSED] closed"));
  auto r = check(h);
  CHECK(r.violations() == 0);
  CHECK(r.allowed_failures == 2);  // the release's UNAVAILABLE, and SESSION_CLOSED
  CHECK(r.failures_by_status["13 INVALID_HANDLE.SESSION_CLOSED"] == 1);
  // The call before the release: nothing closed the session yet.
  h.calls.back().start_ms = 450;
  h.calls.back().end_ms = 460;
  CHECK(check(h).unexpected_failures == 1);
  // After it, but another class: a failed release explains only SESSION_CLOSED.
  h.calls.back() = make(900, "scg-0", "config", "s1", "fake-a", 13, "", "[INVALID_HANDLE.SESSION_NOT_FOUND] gone");
  CHECK(check(h).unexpected_failures == 1);
  // After a release of another session.
  h.calls.back() = make(900, "scg-0", "config", "s3", "fake-a", 13, "", "[INVALID_HANDLE.SESSION_CLOSED] closed");
  CHECK(check(h).unexpected_failures == 1);
}
