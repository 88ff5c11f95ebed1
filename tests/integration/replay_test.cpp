// on_backend_lost.action: replay against scg-fake-spark, which keeps a
// session's confs and gives each session a fresh server-side UUID, as Spark
// does: a killed server's sessions go on on another with their state, under
// the server-side id their client first observed.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;
using namespace std::chrono_literals;

namespace {

struct config_result {
  grpc::Status status;
  std::string backend, server_side;
  std::map<std::string, std::string> pairs;  ///< key → value ("<unset>" without one)
};

/// A Config call of `session` (user "uma") through the gateway: `op` is a
/// ConfigOperation, `observed` the client's observed server-side id.
config_result config_call(int port, const std::string& session, const sc::ConfigOperation& op,
                          const std::string& observed = "", std::chrono::milliseconds timeout = 20s) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user("uma");
  req.set_operation(op.SerializeAsString());
  if (!observed.empty()) req.set_client_observed_server_side_session_id(observed);
  sc::ConfigResponse resp;
  config_result r;
  r.status = stub->Config(&ctx, req, &resp);
  r.backend = header(ctx, "x-fake-backend");
  r.server_side = resp.server_side_session_id();
  for (const auto& kv : resp.pairs()) r.pairs[kv.key()] = kv.has_value() ? kv.value() : "<unset>";
  return r;
}

sc::ConfigOperation set(std::map<std::string, std::string> pairs) {
  sc::ConfigOperation op;
  for (const auto& [k, v] : pairs) {
    auto* kv = op.mutable_set()->add_pairs();
    kv->set_key(k);
    kv->set_value(v);
  }
  return op;
}

sc::ConfigOperation keys(std::initializer_list<const char*> names, bool unset = false) {
  sc::ConfigOperation op;
  for (const auto* k : names) (unset ? op.mutable_unset() : op.mutable_get_option())->add_keys(k);
  return op;
}

/// Whether the admin API lists `name` healthy (reachable, and answering probes).
bool serving(const gateway& gw, const std::string& name) {
  auto j = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/backends").second);
  for (const auto& be : j["backends"])
    if (be["name"] == name) return be["healthy"].get<bool>();
  return false;
}

/// A session id (user uma) the gateway places on `backend`; "" when none of 20 lands there.
std::string session_on(const gateway& gw, const std::string& backend, const std::string& prefix) {
  for (int i = 0; i < 20; ++i) {
    const auto s = uuid_of(prefix + std::to_string(i));
    if (backend_for_session(gw.grpc_port, s, "uma") == backend) return s;
  }
  return "";
}

/// fake-doomed (to kill) and fake-spare behind a gateway with replay on.
struct replay_env {
  temp_dir dir;
  std::unique_ptr<fake_spark> doomed = std::make_unique<fake_spark>(start_fake(dir, "fake-doomed"));
  fake_spark spare = start_fake(dir, "fake-spare");
  gateway gw;
  explicit replay_env(const std::string& tag)
      : gw(start_gateway(dir,
                         gateway_yaml({doomed.get(), &spare},
                                      "on_backend_lost: { after_secs: 2, action: replay }\n"
                                      "health: { interval_ms: 200, timeout_ms: 300, failures: 1 }\n"),
                         tag)) {}
};

}  // namespace

TEST_CASE("a lost server's session goes on on another with its confs, under the id its client first observed",
          "[integration][replay]") {
  replay_env env("replay");
  auto& gw = env.gw;
  const auto s = session_on(gw, "fake-doomed", "replayed-");
  REQUIRE(!s.empty());

  auto first = config_call(gw.grpc_port, s, set({{"spark.sql.shuffle.partitions", "7"}, {"spark.x", "1"}}));
  REQUIRE(first.status.ok());
  const auto observed = first.server_side;
  REQUIRE(observed.size() == 36);
  REQUIRE(config_call(gw.grpc_port, s, set({{"spark.y", "2"}}), observed).status.ok());
  REQUIRE(config_call(gw.grpc_port, s, keys({"spark.y"}, true), observed).status.ok());  // unset
  REQUIRE(config_call(gw.grpc_port, s, set({{"spark.x", "3"}}), observed).status.ok());
  CHECK(metric_value(gw.admin_port, "scg_journal_sessions") == 1);
  CHECK(metric_value(gw.admin_port, "scg_journal_bytes") > 0);

  env.doomed.reset();  // SIGKILL
  REQUIRE(eventually([&] { return !serving(gw, "fake-doomed"); }, 5s));
  // Down, not yet lost: the call is held (no UNAVAILABLE for the client to
  // back off from), then replayed on fake-spare once the server counts as lost.
  const auto asked = std::chrono::steady_clock::now();
  auto after = config_call(gw.grpc_port, s, keys({"spark.sql.shuffle.partitions", "spark.x", "spark.y"}), observed);
  INFO(after.status.error_message());
  REQUIRE(after.status.ok());
  CHECK(std::chrono::steady_clock::now() - asked > 500ms);
  CHECK(after.backend == "fake-spare");
  CHECK(after.server_side == observed);  // the new server's id, translated back
  CHECK(after.pairs["spark.sql.shuffle.partitions"] == "7");
  CHECK(after.pairs["spark.x"] == "3");
  CHECK(after.pairs["spark.y"] == "<unset>");
  CHECK(metric_value(gw.admin_port, "scg_replays_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_replay_entries_total") == 2);

  // Later calls carry the old id to the new server, which knows its own: no SESSION_CHANGED.
  for (int i = 0; i < 3; ++i) {
    auto again = config_call(gw.grpc_port, s, keys({"spark.x"}), observed);
    INFO(again.status.error_message());
    CHECK(again.status.ok());
    CHECK(again.server_side == observed);
    CHECK(again.backend == "fake-spare");
  }
  CHECK(metric_value(gw.admin_port, "scg_replays_total") == 1);
  // An ExecutePlan stream's responses are translated too.
  auto req = execute(s, "uma");
  req.set_client_observed_server_side_session_id(observed);
  auto stub = stub_to(gw.grpc_port);
  auto r = execute_plan(*stub, req, {{"x-fake-responses", "3"}});
  INFO(r.status.error_message());
  CHECK(r.status.ok());
  CHECK(r.backend == "fake-spare");
}

TEST_CASE("an operation that ran on the lost server ends with an error naming it, and the session goes on",
          "[integration][replay]") {
  replay_env env("replay-op");
  auto& gw = env.gw;
  const auto s = session_on(gw, "fake-doomed", "op-lost-");
  REQUIRE(!s.empty());
  auto stub = stub_to(gw.grpc_port);
  const auto op = uuid_of("op-lost-op");
  auto started = execute_plan(*stub, execute(s, "uma", op), {{"x-fake-responses", "2"}});
  REQUIRE(started.status.ok());

  env.doomed.reset();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto stream = stub->ReattachExecute(&ctx, reattach(s, "uma", op, ""));
  sc::ExecutePlanResponse resp;
  while (stream->Read(&resp)) {
  }
  const auto st = stream->Finish();
  INFO(st.error_message());
  CHECK(st.error_code() == grpc::StatusCode::ABORTED);
  CHECK(st.error_message().find("fake-doomed") != std::string::npos);
  CHECK(st.error_message().find(op) != std::string::npos);
  CHECK(metric_value(gw.admin_port, "scg_forward_operations_lost_total") == 1);
  // The next query of the session works, on the spare.
  auto next = execute_plan(*stub, execute(s, "uma", uuid_of("op-lost-next")));
  INFO(next.status.error_message());
  CHECK(next.status.ok());
  CHECK(next.backend == "fake-spare");
}

TEST_CASE("a session that cannot be replayed is told why, and one past its journal bound is reported",
          "[integration][replay]") {
  replay_env env("replay-no");
  auto& gw = env.gw;
  const auto s = session_on(gw, "fake-doomed", "no-replay-");
  const auto big = session_on(gw, "fake-doomed", "too-big-");
  REQUIRE(!s.empty());
  REQUIRE(!big.empty());
  // localCheckpoint: ExecutePlan of Plan{command 2: {checkpoint_command 14: {}}}.
  auto req = execute(s, "uma", uuid_of("checkpoint-op"));
  req.set_plan(std::string("\x12\x02\x72\x00", 4));
  auto stub = stub_to(gw.grpc_port);
  REQUIRE(execute_plan(*stub, req).status.ok());
  CHECK(metric_value(gw.admin_port, "scg_sessions_unreplayable{reason=\"checkpoint\"}") == 1);
  // A journal over max_journal_kib (1024 by default): a 1.5 MiB conf value.
  REQUIRE(config_call(gw.grpc_port, big, set({{"spark.big", std::string(1536 << 10, 'b')}})).status.ok());
  CHECK(metric_value(gw.admin_port, "scg_sessions_unreplayable{reason=\"too_large\"}") == 1);
  CHECK(metric_value(gw.admin_port, "scg_journal_bytes") == 0);
  // The session listing says which sessions can be replayed, and why not.
  auto listed = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/sessions?session=" + s).second);
  REQUIRE(listed["sessions"].size() == 1);
  CHECK(listed["sessions"][0]["replayable"] == false);
  CHECK(listed["sessions"][0]["unreplayable_reason"] == "checkpoint");
  const auto fine = session_on(gw, "fake-spare", "fine-");
  listed = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/sessions?session=" + fine).second);
  REQUIRE(listed["sessions"].size() == 1);
  CHECK(listed["sessions"][0]["replayable"] == true);
  CHECK(listed["sessions"][0]["unreplayable_reason"].is_null());

  const auto observed = config_call(gw.grpc_port, s, keys({"a"})).server_side;
  env.doomed.reset();
  auto after = config_call(gw.grpc_port, s, keys({"a"}), observed);
  CHECK(after.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(after.status.error_message().find("checkpoint") != std::string::npos);
  CHECK(after.status.error_message().find("fake-doomed") != std::string::npos);
  CHECK(metric_value(gw.admin_port, "scg_replays_refused_total") == 1);
  // It went on on the spare as a new session: Spark there says so to a client with the old id.
  auto again = config_call(gw.grpc_port, s, keys({"a"}), observed);
  CHECK(again.backend == "fake-spare");
  CHECK(again.status.error_message().find("SESSION_CHANGED") != std::string::npos);
}
