// Per-tenant accounting end to end: two tenants with static tokens run
// sessions and executions through scg against scg-fake-spark; /metrics and
// GET /api/v1/usage must say what the clients did and what the backend
// reported (rows from the arrow batches' row_count and from the metrics
// response, result bytes, executions), count a rejection under its reason,
// and keep tenants beyond accounting.max_tenants under "_other".
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>

#include "core/protowire.hpp"
#include "tests/integration/harness.hpp"

using namespace scg::test;
using namespace std::chrono_literals;
namespace sc = spark::connect;

namespace {

/// What a client saw of one execution.
struct seen {
  grpc::Status status;
  long rows = 0;          ///< Σ arrow_batch.row_count received
  long bytes = 0;         ///< Σ serialized response sizes (the gRPC message lengths)
  long reported_rows = 0; ///< numOutputRows of the backend's metrics response
};

/// numOutputRows in a response's metrics (field 4: Metrics, MetricObject,
/// the execution_metrics map, MetricValue.value), which scg's proto leaves undeclared.
long reported_rows(const sc::ExecutePlanResponse& r) {
  namespace pw = scg::core::protowire;
  long rows = 0;
  const auto& unknown = r.GetReflection()->GetUnknownFields(r);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const auto& f = unknown.field(i);
    if (f.number() != 4 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    std::string_view metrics = f.length_delimited();
    pw::field node, part, kv, value;
    while (!metrics.empty() && pw::next(metrics, node)) {
      if (node.number != 1 || node.type != 2) continue;
      for (auto n = node.payload; !n.empty() && pw::next(n, part);) {
        if (part.number != 4 || part.type != 2) continue;
        std::string_view key, val;
        for (auto e = part.payload; !e.empty() && pw::next(e, kv);) (kv.number == 1 ? key : val) = kv.payload;
        if (key != "numOutputRows") continue;
        while (!val.empty() && pw::next(val, value))
          if (value.number == 2 && value.type == 0) rows += static_cast<long>(value.varint);
      }
    }
  }
  return rows;
}

seen run_query(int port, const std::string& token, const std::string& session, const std::string& user_id,
               int batches, int rows_per_batch) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.AddMetadata("x-fake-responses", std::to_string(batches));
  ctx.AddMetadata("x-fake-rows-per-batch", std::to_string(rows_per_batch));
  ctx.AddMetadata("x-fake-payload-bytes", "300");
  ctx.AddMetadata("x-fake-metrics", "1");
  auto reader = stub->ExecutePlan(&ctx, execute(session, user_id));
  seen s;
  sc::ExecutePlanResponse r;
  while (reader->Read(&r)) {
    s.bytes += static_cast<long>(r.ByteSizeLong());
    if (r.has_arrow_batch()) s.rows += r.arrow_batch().row_count();
    s.reported_rows += reported_rows(r);
  }
  s.status = reader->Finish();
  return s;
}

grpc::Status config_call(int port, const std::string& token, const std::string& session, const std::string& user_id) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  ctx.AddMetadata("authorization", "Bearer " + token);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  sc::ConfigResponse resp;
  return stub->Config(&ctx, req, &resp);
}

const std::string tokens =
    "auth:\n  type: static\n  tokens:\n"
    "    - { token: tok-alice-0123456789, user_id: alice, tenant: team-a }\n"
    "    - { token: tok-bob-0123456789, user_id: bob, tenant: team-b }\n"
    "    - { token: tok-carol-0123456789, user_id: carol, tenant: team-c }\n";

std::string tenant_series(const std::string& name, const std::string& tenant, const std::string& more = "") {
  return name + "{tenant=\"" + tenant + "\"" + more + "}";
}

nlohmann::json usage(int admin, const std::string& query) {
  auto [code, body] = http_get(admin, "/api/v1/usage" + query);
  INFO(query << " -> " << code << " " << body);
  REQUIRE(code == 200);
  return nlohmann::json::parse(body);
}

const nlohmann::json* row_of(const nlohmann::json& u, const std::string& tenant, const std::string& user = "") {
  for (const auto& r : u["rows"])
    if (r["tenant"] == tenant && (user.empty() || r["user"] == user)) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("usage per tenant equals what the clients received and what the backend reported",
          "[integration][accounting]") {
  temp_dir dir;
  auto backend = start_fake(dir, "fake-acct");
  auto gw = start_gateway(dir,
                          gateway_yaml({&backend}, tokens +
                                                       "rate_limits:\n  per_tenant: { rps: 1000, burst: 1000 }\n"
                                                       "  tenants:\n    team-b: { rps: 1, burst: 3 }\n"
                                                       "accounting: { max_tenants: 2, max_users: 10 }\n"),
                          "accounting");
  const int port = gw.grpc_port, admin = gw.admin_port;

  // team-a: two sessions, three executions of different shapes.
  seen a;
  for (auto [session, batches, rows] : {std::tuple{"a-1", 4, 25}, {"a-1", 2, 1000}, {"a-2", 3, 7}}) {
    auto s = run_query(port, "tok-alice-0123456789", uuid_of(session), "alice", batches, rows);
    REQUIRE(s.status.ok());
    CHECK(s.rows == long(batches) * rows);
    CHECK(s.reported_rows == s.rows);  // the backend's own figure
    a.rows += s.rows;
    a.bytes += s.bytes;
    a.reported_rows += s.reported_rows;
  }
  // team-b: one execution, then Config calls until its rate limit refuses one.
  auto b = run_query(port, "tok-bob-0123456789", uuid_of("b-1"), "bob", 5, 3);
  REQUIRE(b.status.ok());
  int b_calls = 1, b_limited = 0;
  for (int i = 0; i < 20 && b_limited == 0; ++i) {
    auto st = config_call(port, "tok-bob-0123456789", uuid_of("b-1"), "bob");
    ++b_calls;
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++b_limited;
  }
  REQUIRE(b_limited == 1);
  // team-c is a third tenant: beyond max_tenants 2, it counts as _other.
  REQUIRE(run_query(port, "tok-carol-0123456789", uuid_of("c-1"), "carol", 1, 1).status.ok());
  // A bad credential has no tenant.
  CHECK(config_call(port, "tok-nobody-000000", uuid_of("x"), "x").error_code() == grpc::StatusCode::UNAUTHENTICATED);

  // Calls are counted when they end, a moment after the client has its status.
  const auto rows_a = tenant_series("scg_tenant_result_rows_total", "team-a");
  REQUIRE(eventually(metric(admin, rows_a) == a.rows, 5s));
  CHECK(a.rows == 4 * 25 + 2 * 1000 + 3 * 7);
  CHECK(metric_value(admin, tenant_series("scg_tenant_result_bytes_total", "team-a")) == a.bytes);
  CHECK(metric_value(admin, tenant_series("scg_tenant_executions_total", "team-a")) == 3);
  CHECK(metric_value(admin, tenant_series("scg_tenant_sessions_total", "team-a")) == 2);
  CHECK(metric_value(admin, tenant_series("scg_tenant_sessions_active", "team-a")) == 2);
  CHECK(metric_value(admin, tenant_series("scg_tenant_rpcs_total", "team-a", ",method=\"ExecutePlan\"")) == 3);
  CHECK(metric_value(admin, tenant_series("scg_tenant_result_rows_total", "team-b")) == b.rows);
  CHECK(metric_value(admin, tenant_series("scg_tenant_rpcs_total", "team-b", ",method=\"Config\"")) == b_calls - 1);
  CHECK(metric_value(admin, tenant_series("scg_tenant_rejections_total", "team-b", ",reason=\"rate_limited\"")) ==
        b_limited);
  CHECK(metric_value(admin, tenant_series("scg_tenant_rejections_total", "team-a", ",reason=\"rate_limited\"")) == -1);
  CHECK(metric_value(admin, tenant_series("scg_tenant_rejections_total", "_none", ",reason=\"unauthenticated\"")) == 1);
  CHECK(metric_value(admin, tenant_series("scg_tenant_result_rows_total", "_other")) == 1);
  CHECK(metric_value(admin, tenant_series("scg_tenant_result_rows_total", "team-c")) == -1);
  CHECK(metric_value(admin, "scg_accounting_tenant_overflows_total") >= 2);  // carol's session and her call
  // The whole process agrees: every response byte of these executions is a result byte.
  CHECK(metric_value(admin, "scg_user_rpcs_total{tenant=\"team-a\",user=\"alice\"}") == -1);  // off by default

  auto by_tenant = usage(admin, "?window=5m");
  CHECK(by_tenant["by"] == "tenant");
  CHECK(by_tenant["window_minutes"] == 5);
  const auto* ra = row_of(by_tenant, "team-a");
  REQUIRE(ra);
  CHECK((*ra)["result_rows"] == a.rows);
  CHECK((*ra)["result_bytes"] == a.bytes);
  CHECK((*ra)["executions"] == 3);
  CHECK((*ra)["sessions"] == 2);
  CHECK((*ra)["rpcs"] == 3);
  CHECK((*ra)["rejections"] == 0);
  CHECK((*ra)["execution_seconds"].get<double>() >= 0);
  const auto* rb = row_of(by_tenant, "team-b");
  REQUIRE(rb);
  CHECK((*rb)["rejections"] == b_limited);
  CHECK(row_of(by_tenant, "_other"));
  CHECK_FALSE(row_of(by_tenant, "team-c"));

  auto by_user = usage(admin, "?by=user&tenant=team-a&window=1h");
  REQUIRE(by_user["rows"].size() == 1);
  CHECK(by_user["rows"][0]["user"] == "alice");
  CHECK(by_user["rows"][0]["result_rows"] == a.rows);
  auto top = usage(admin, "?limit=1");
  CHECK(top["rows"].size() == 1);
  CHECK(top["truncated"] == true);

  for (const auto* bad : {"?by=session", "?window=2h", "?window=0m", "?window=15", "?limit=0", "?limit=x"}) {
    auto [code, body] = http_get(admin, std::string("/api/v1/usage") + bad);
    INFO(bad << " -> " << body);
    CHECK(code == 400);
    CHECK(nlohmann::json::parse(body).contains("error"));
  }
}

TEST_CASE("prometheus_users shows the top users, and pools show what placement sees", "[integration][accounting]") {
  temp_dir dir;
  auto fa = start_fake(dir, "fake-p1");
  auto fb = start_fake(dir, "fake-p2");
  auto gw = start_gateway(dir,
                          gateway_yaml({&fa, &fb}, tokens +
                                                       "tenants:\n  pools: { team-b: [fake-p2] }\n"
                                                       "accounting: { prometheus_users: 1 }\n"),
                          "accounting-pools");
  const int port = gw.grpc_port, admin = gw.admin_port;
  for (int i = 0; i < 3; ++i) REQUIRE(config_call(port, "tok-alice-0123456789", uuid_of("a-1"), "alice").ok());
  REQUIRE(config_call(port, "tok-bob-0123456789", uuid_of("b-1"), "bob").ok());
  // team-a has no pool: with pools configured it is the default tenant (on_unknown_tenant: use_default).
  REQUIRE(eventually(metric(admin, "scg_user_rpcs_total{tenant=\"default\",user=\"alice\"}") == 3, 5s));
  CHECK(metric_value(admin, "scg_user_rpcs_total{tenant=\"team-b\",user=\"bob\"}") == -1);  // not in the top 1

  CHECK(metric_value(admin, "scg_pool_backends{pool=\"_all\"}") == 2);
  CHECK(metric_value(admin, "scg_pool_backends{pool=\"team-b\"}") == 1);
  // bob's session is on fake-p2, his pool; alice's on either.
  const long on_p2 = metric_value(admin, "scg_backend_sessions{backend=\"fake-p2\"}");
  REQUIRE(on_p2 >= 1);
  CHECK(metric_value(admin, "scg_pool_sessions{pool=\"team-b\"}") == on_p2);
  CHECK(metric_value(admin, "scg_pool_sessions{pool=\"_all\"}") == 2);
  auto pools = nlohmann::json::parse(http_get(admin, "/api/v1/pools").second);
  REQUIRE(pools["pools"].size() == 2);
  CHECK(pools["pools"][1]["pool"] == "team-b");
  CHECK(pools["pools"][1]["backends"] == nlohmann::json::array({"fake-p2"}));
  // No Spark UI figure yet: the score is the session term, 0.1 × sessions / 50 (session_cap).
  CHECK(pools["pools"][1]["saturation"].get<double>() == Approx(0.1 * double(on_p2) / 50).margin(1e-9));
  CHECK(pools["pools"][0]["saturation"].get<double>() == Approx(0.1 * 2.0 / 50 / 2).margin(1e-9));
  // Draining the pool's only backend leaves it nothing eligible: saturation 1.
  REQUIRE(http_post(admin, "/api/v1/backends/fake-p2/drain", "").first == 200);
  REQUIRE(eventually([&] {
    auto j = nlohmann::json::parse(http_get(admin, "/api/v1/pools").second);
    return j["pools"][1]["eligible"] == 0 && j["pools"][1]["saturation"].get<double>() == 1.0;
  }, 5s));
}
