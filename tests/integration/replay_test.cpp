// on_backend_lost.action: replay against scg-fake-spark, which keeps a
// session's confs and gives each session a fresh server-side UUID, as Spark
// does: a killed server's sessions go on on another with their state, under
// the server-side id their client first observed.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include <zlib.h>

#include "core/protowire.hpp"
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
                          const std::string& observed = "", std::chrono::milliseconds timeout = 20s,
                          const std::string& tenant = "") {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!tenant.empty()) ctx.AddMetadata("x-tenant", tenant);
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
  /// `lost_extra` is added to on_backend_lost (after `action: replay`), `extra` to the file; the spool lives in
  /// the test's directory.
  explicit replay_env(const std::string& tag, const std::string& lost_extra = "", const std::string& extra = "")
      : gw(start_gateway(dir,
                         gateway_yaml({doomed.get(), &spare},
                                      "on_backend_lost: { after_secs: 2, action: replay, spool_dir: " + spool() +
                                          lost_extra + " }\n"
                                      "health: { interval_ms: 200, timeout_ms: 300, failures: 1 }\n" + extra),
                         tag)) {}
  std::string spool() const { return dir.file("spool"); }
};

/// An AddArtifacts call of `session` (user uma) through the gateway, one
/// request message per payload (`batch` 3, `begin_chunk` 4 or `chunk` 5).
grpc::Status upload(int port, const std::string& session, const std::vector<std::pair<int, std::string>>& payloads,
                    const std::string& observed = "") {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  sc::AddArtifactsResponse resp;
  auto writer = stub->AddArtifacts(&ctx, &resp);
  for (const auto& [field, payload] : payloads) {
    sc::AddArtifactsRequest req;
    req.set_session_id(session);
    *req.mutable_user_context() = user("uma");
    if (!observed.empty()) req.set_client_observed_server_side_session_id(observed);
    if (field == 3) req.set_batch(payload);
    if (field == 4) req.set_begin_chunk(payload);
    if (field == 5) req.set_chunk(payload);
    if (!writer->Write(req)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

/// ArtifactStatus of `names` for `session`: name → exists; the backend that answered in "@backend".
std::map<std::string, bool> artifact_status(int port, const std::string& session, const std::string& observed,
                                            std::initializer_list<const char*> names) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  sc::ArtifactStatusesRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user("uma");
  req.set_client_observed_server_side_session_id(observed);
  for (const auto* n : names) req.add_names(n);
  sc::ArtifactStatusesResponse resp;
  const auto status = stub->ArtifactStatus(&ctx, req, &resp);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(resp.server_side_session_id() == observed);
  std::map<std::string, bool> out;
  for (const auto& [name, st] : resp.statuses()) out[name] = st.exists();
  out["@" + header(ctx, "x-fake-backend")] = true;
  return out;
}

/// A ReattachExecute of operation `op` of `session` (user uma), read to its end: its status.
grpc::Status reattach_to_end(sc::SparkConnectService::Stub& stub, const std::string& session, const std::string& op) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto stream = stub.ReattachExecute(&ctx, reattach(session, "uma", op, ""));
  sc::ExecutePlanResponse resp;
  while (stream->Read(&resp)) {
  }
  return stream->Finish();
}

std::size_t spooled_files(const std::string& parent) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(parent)) n += e.is_regular_file();
  return n;
}

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
  const auto st = reattach_to_end(*stub, s, op);
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

TEST_CASE("a lost server's session gets its artifacts back first, and the spool is bounded and emptied at release",
          "[integration][replay]") {
  replay_env env("replay-art", ", max_artifacts_mib: 1");
  auto& gw = env.gw;
  const auto spool = env.spool();
  const auto s = session_on(gw, "fake-doomed", "artifacts-");
  const auto big = session_on(gw, "fake-doomed", "artifacts-big-");
  REQUIRE(!s.empty());
  REQUIRE(!big.empty());
  const auto observed = config_call(gw.grpc_port, s, keys({"a"})).server_side;
  REQUIRE(observed.size() == 36);

  // A batch of two, a chunked artifact in three messages, then one of the first two again.
  auto chunk = [](const std::string& data) {
    std::string out;
    scg::core::protowire::put_bytes(out, 1, data);
    scg::core::protowire::put_uint(out, 2, ::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    return out;
  };
  std::string begin;
  scg::core::protowire::put_bytes(begin, 1, "cache/chunked");
  scg::core::protowire::put_uint(begin, 2, 3 * 40000);
  scg::core::protowire::put_uint(begin, 3, 3);
  scg::core::protowire::put_bytes(begin, 4, chunk(std::string(40000, '1')));
  REQUIRE(upload(gw.grpc_port, s, {{3, artifact_batch({{"cache/abc", "rows"}, {"pyfiles/m.py", "x = 1"}})}}, observed)
              .ok());
  REQUIRE(upload(gw.grpc_port, s, {{4, begin}, {5, chunk(std::string(40000, '2'))}, {5, chunk(std::string(40000, '3'))}},
                 observed)
              .ok());
  REQUIRE(upload(gw.grpc_port, s, {{3, artifact_batch({{"pyfiles/m.py", "x = 1"}})}}, observed).ok());
  CHECK(spooled_files(spool) == 3);
  CHECK(metric_value(gw.admin_port, "scg_spool_bytes") > 120000);
  // Over max_artifacts_mib: unreplayable, and nothing of it stays on disk.
  REQUIRE(upload(gw.grpc_port, big, {{3, artifact_batch({{"cache/big", std::string(600 << 10, 'b')}})}}).ok());
  REQUIRE(upload(gw.grpc_port, big, {{3, artifact_batch({{"cache/big2", std::string(600 << 10, 'b')}})}}).ok());
  CHECK(metric_value(gw.admin_port, "scg_sessions_unreplayable{reason=\"artifacts_too_large\"}") == 1);
  CHECK(spooled_files(spool) == 3);
  CHECK(metric_value(gw.admin_port, "scg_spool_bytes") < 200000);

  env.doomed.reset();  // SIGKILL
  auto after = artifact_status(gw.grpc_port, s, observed, {"cache/abc", "cache/chunked", "cache/never"});
  CHECK(after["@fake-spare"]);
  CHECK(after["cache/abc"]);
  CHECK(after["cache/chunked"]);
  CHECK(!after["cache/never"]);
  CHECK(metric_value(gw.admin_port, "scg_replays_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_replay_entries_total") == 3);

  // Released: its files go.
  auto stub = stub_to(gw.grpc_port);
  grpc::ClientContext ctx;
  sc::ReleaseSessionRequest rel;
  rel.set_session_id(s);
  *rel.mutable_user_context() = user("uma");
  sc::ReleaseSessionResponse resp;
  REQUIRE(stub->ReleaseSession(&ctx, rel, &resp).ok());
  CHECK(spooled_files(spool) == 0);
  CHECK(metric_value(gw.admin_port, "scg_spool_bytes") == 0);
}

TEST_CASE("on_backend_lost.tenants: one tenant's sessions are replayed, another's fail, and only the first are journaled",
          "[integration][replay]") {
  replay_env env("replay-tenants", ", tenants: { plain: fail }", "tenants: { from: header, header: x-tenant }\n");
  auto& gw = env.gw;
  // Both tenants' sessions on fake-doomed (user uma; each tenant its own key).
  auto on_doomed = [&](const std::string& tenant, const std::string& prefix) {
    for (int i = 0; i < 20; ++i) {
      const auto s = uuid_of(prefix + std::to_string(i));
      auto r = config_call(gw.grpc_port, s, set({{"spark.t", tenant}}), "", 20s, tenant);
      if (r.status.ok() && r.backend == "fake-doomed") return std::make_pair(s, r.server_side);
    }
    return std::make_pair(std::string(), std::string());
  };
  const auto [gold, gold_id] = on_doomed("gold", "tenant-gold-");
  const auto [plain, plain_id] = on_doomed("plain", "tenant-plain-");
  REQUIRE(!gold.empty());
  REQUIRE(!plain.empty());
  CHECK(metric_value(gw.admin_port, "scg_journal_sessions") == 1);  // gold's only
  auto listed = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/sessions?session=" + plain).second);
  REQUIRE(listed["sessions"].size() == 1);
  CHECK(!listed["sessions"][0].contains("replayable"));
  listed = nlohmann::json::parse(http_get(gw.admin_port, "/api/v1/sessions?session=" + gold).second);
  REQUIRE(listed["sessions"].size() == 1);
  CHECK(listed["sessions"][0]["replayable"] == true);

  env.doomed.reset();  // SIGKILL
  auto g = config_call(gw.grpc_port, gold, keys({"spark.t"}), gold_id, 20s, "gold");
  INFO(g.status.error_message());
  CHECK(g.status.ok());
  CHECK(g.backend == "fake-spare");
  CHECK(g.server_side == gold_id);
  CHECK(g.pairs["spark.t"] == "gold");
  auto p = config_call(gw.grpc_port, plain, keys({"spark.t"}), plain_id, 20s, "plain");
  INFO(p.status.error_message());
  CHECK(p.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(p.status.error_message().find("fake-doomed") != std::string::npos);
  CHECK(metric_value(gw.admin_port, "scg_replays_total") == 1);
  CHECK(metric_value(gw.admin_port, "scg_forward_backend_lost_total") >= 1);
  // Per tenant: gold's replay, plain's refusal.
  CHECK(metric_value(gw.admin_port, "scg_tenant_replays_total{tenant=\"gold\"}") == 1);
  CHECK(metric_value(gw.admin_port, "scg_tenant_replays_total{tenant=\"plain\"}") == 0);
  CHECK(metric_value(gw.admin_port, "scg_tenant_rejections_total{tenant=\"plain\",reason=\"backend_lost\"}") == 1);
}

TEST_CASE("the journal of a session whose binding expired is swept", "[integration][replay]") {
  replay_env env("replay-sweep", "", "affinity: { session_ttl_secs: 2 }\n");
  auto& gw = env.gw;
  const auto s = uuid_of("swept-session");
  REQUIRE(config_call(gw.grpc_port, s, set({{"spark.x", "1"}})).status.ok());
  CHECK(metric_value(gw.admin_port, "scg_journal_sessions") == 1);
  // Expired after 2 s idle, swept within the next second or two.
  CHECK(eventually(metric(gw.admin_port, "scg_journals_swept_total") >= 1, 15s));
  CHECK(metric_value(gw.admin_port, "scg_journal_sessions") == 0);
}

TEST_CASE("a command whose ExecutePlan stream broke is journaled when its reattach ends OK", "[integration][replay]") {
  replay_env env("replay-reattach");
  auto& gw = env.gw;
  const auto s = session_on(gw, "fake-doomed", "reattached-");
  REQUIRE(!s.empty());
  auto stub = stub_to(gw.grpc_port);
  const auto op = uuid_of("reattached-op");
  auto req = execute(s, "uma", op);
  // Plan{command 2: {sql_command 5: {input 6: {sql 10: {query 1: "SET scg.reattached=1"}}}}}
  auto ld = [](int field, const std::string& payload) {
    std::string out;
    scg::core::protowire::put_bytes(out, field, payload);
    return out;
  };
  req.set_plan(ld(2, ld(5, ld(6, ld(10, ld(1, "SET scg.reattached=1"))))));
  {  // The client reads one response, then its stream breaks (cancelled).
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-fake-responses", "4");
    ctx.AddMetadata("x-fake-delay-ms", "200");
    auto stream = stub->ExecutePlan(&ctx, req);
    sc::ExecutePlanResponse resp;
    REQUIRE(stream->Read(&resp));
    ctx.TryCancel();
    while (stream->Read(&resp)) {
    }
    CHECK(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  CHECK(metric_value(gw.admin_port, "scg_journal_bytes") == 0);  // not yet: its end is unknown
  const auto st = reattach_to_end(*stub, s, op);
  INFO(st.error_message());
  REQUIRE(st.ok());
  CHECK(eventually([&] { return metric_value(gw.admin_port, "scg_journal_bytes") > 0; }, 5s));
  CHECK(metric_value(gw.admin_port, "scg_journal_sessions") == 1);
}
