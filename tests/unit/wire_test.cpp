#include "net/wire.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace scg::net;

namespace {

using bytes = std::vector<std::uint8_t>;

/// A hand encoder of protobuf wire format; `ends` records where each
/// top-level field ends, so tests know which prefixes are whole messages.
struct enc {
  bytes b;
  std::vector<std::size_t> ends;

  enc& raw_varint(std::uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<std::uint8_t>(v | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<std::uint8_t>(v));
    return *this;
  }
  enc& tag(std::uint64_t field, int type) { return raw_varint(field << 3 | type); }
  enc& done() {
    ends.push_back(b.size());
    return *this;
  }
  enc& varint(std::uint64_t field, std::uint64_t v) { return tag(field, 0).raw_varint(v).done(); }
  enc& str(std::uint64_t field, const std::string& s) {
    tag(field, 2).raw_varint(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return done();
  }
  enc& msg(std::uint64_t field, const enc& m) {
    return str(field, std::string(m.b.begin(), m.b.end()));
  }
  enc& fixed32(std::uint64_t field) {
    tag(field, 5);
    b.insert(b.end(), 4, 0xab);
    return done();
  }
  enc& fixed64(std::uint64_t field) {
    tag(field, 1);
    b.insert(b.end(), 8, 0xcd);
    return done();
  }
  enc& raw(std::initializer_list<std::uint8_t> bs) {
    b.insert(b.end(), bs);
    return *this;
  }
};

segments one(const bytes& b) { return {segment{b.data(), b.size()}}; }

/// Splits `b` at the given offsets (ascending) into consecutive segments.
segments split(const bytes& b, std::vector<std::size_t> cuts) {
  segments out;
  std::size_t from = 0;
  cuts.push_back(b.size());
  for (auto c : cuts) {
    out.push_back(segment{b.data() + from, c - from});
    from = c;
  }
  return out;
}

enc user(const std::string& id) { return enc{}.str(1, id).str(2, "name-" + id); }

request_fields scan_req(rpc r, const enc& e) {
  request_fields f;
  auto res = scan_request(r, one(e.b), f);
  REQUIRE(res.ok);
  CHECK(res.reason.empty());
  return f;
}

response_fields scan_resp(rpc r, const enc& e) {
  response_fields f;
  auto res = scan_response(r, one(e.b), f);
  REQUIRE(res.ok);
  return f;
}

/// A request carrying every field number 3..20 as a string "fN", plus
/// session, user and field 4 once more as a varint (Interrupt's
/// interrupt_type); each rpc should pick out only its own fields, each of the
/// wire type it expects.
enc every_field_request() {
  enc e;
  e.str(1, "sess").msg(2, user("alice"));
  for (int f = 3; f <= 20; ++f) e.str(f, "f" + std::to_string(f));
  return e.varint(4, 3);
}

enc every_field_response() {
  enc e;
  for (int f = 1; f <= 20; ++f) e.str(f, "f" + std::to_string(f));
  return e;
}

/// An ExecutePlanRequest with a plan around the routing fields.
enc sample_execute() {
  return enc{}
      .str(1, "session-123")
      .msg(2, user("bob"))
      .str(3, std::string(40, 'p'))
      .str(4, "python")
      .str(6, "op-42")
      .str(7, "tag")
      .str(8, "server-side-9");
}

}  // namespace

TEST_CASE("method paths map to rpcs and back", "[wire]") {
  for (std::size_t i = 0; i + 1 < rpc_count; ++i) {
    auto r = static_cast<rpc>(i);
    std::string path = std::string(service_prefix) + std::string(rpc_name(r));
    CHECK(rpc_from_path(path) == r);
  }
  CHECK(rpc_from_path("/spark.connect.SparkConnectService/ExecutePlan") == rpc::execute_plan);
  CHECK(rpc_from_path("/spark.connect.SparkConnectService/ListSqlExecutions") == rpc::unknown);
  CHECK(rpc_from_path("/spark.connect.SparkConnectService/") == rpc::unknown);
  CHECK(rpc_from_path("/spark.connect.SparkConnectService/executeplan") == rpc::unknown);
  CHECK(rpc_from_path("/spark.connect.SparkConnectService/ExecutePlan/") == rpc::unknown);
  CHECK(rpc_from_path("/other.Service/ExecutePlan") == rpc::unknown);
  CHECK(rpc_from_path("") == rpc::unknown);
  CHECK(rpc_name(rpc::unknown) == "unknown");
  CHECK(rpc_name(rpc::artifact_status) == "ArtifactStatus");
}

TEST_CASE("unary rpcs are told apart from streaming ones", "[wire]") {
  for (auto r :
       {rpc::analyze_plan, rpc::config, rpc::artifact_status, rpc::interrupt, rpc::release_execute,
        rpc::release_session, rpc::fetch_error_details, rpc::clone_session, rpc::get_status})
    CHECK(is_unary(r));
  for (auto r : {rpc::execute_plan, rpc::reattach_execute, rpc::add_artifacts, rpc::unknown})
    CHECK_FALSE(is_unary(r));
}

TEST_CASE("each request reads exactly its own routing fields", "[wire]") {
  struct expect {
    rpc r;
    std::string op, obs, new_session;
    std::uint64_t interrupt_type;
    bool release_all;
  };
  const expect cases[] = {
      {rpc::execute_plan, "f6", "f8", "", 0, false},
      {rpc::analyze_plan, "", "f17", "", 0, false},
      {rpc::config, "", "f8", "", 0, false},
      {rpc::add_artifacts, "", "f7", "", 0, false},
      {rpc::artifact_status, "", "f5", "", 0, false},
      {rpc::interrupt, "f6", "f7", "", 3, false},
      {rpc::reattach_execute, "f3", "f6", "", 0, false},
      {rpc::release_execute, "f3", "f7", "", 0, true},
      {rpc::release_session, "", "", "", 0, false},
      {rpc::fetch_error_details, "", "f5", "", 0, false},
      {rpc::clone_session, "", "f5", "f4", 0, false},
      {rpc::get_status, "", "f4", "", 0, false},
      {rpc::unknown, "", "", "", 0, false},
  };
  const enc msg = every_field_request();
  for (const auto& c : cases) {
    INFO(rpc_name(c.r));
    auto f = scan_req(c.r, msg);
    CHECK(f.session_id == "sess");
    CHECK(f.user_id == "alice");
    CHECK(f.operation_id == c.op);
    CHECK(f.observed_server_session == c.obs);
    CHECK(f.new_session_id == c.new_session);
    CHECK(f.interrupt_type == c.interrupt_type);
    CHECK(f.release_all == c.release_all);
  }
}

TEST_CASE("clone session reads its new session id", "[wire]") {
  auto f = scan_req(rpc::clone_session, enc{}.str(1, "s").str(4, "s2").str(5, "obs"));
  CHECK(f.new_session_id == "s2");
  CHECK(f.observed_server_session == "obs");
}

TEST_CASE("release_all is read from the presence of an empty message", "[wire]") {
  CHECK(scan_req(rpc::release_execute, enc{}.str(1, "s").str(3, "op").str(5, "")).release_all);
  auto until =
      scan_req(rpc::release_execute, enc{}.str(1, "s").str(3, "op").msg(6, enc{}.str(1, "r")));
  CHECK_FALSE(until.release_all);
  CHECK(until.operation_id == "op");
}

TEST_CASE("each response reads exactly its own routing fields", "[wire]") {
  struct expect {
    rpc r;
    std::string session, server_side, op, new_session, new_server_side;
    bool complete;
  };
  const expect cases[] = {
      {rpc::execute_plan, "f1", "f15", "f12", "", "", true},
      {rpc::analyze_plan, "f1", "f15", "", "", "", false},
      {rpc::config, "f1", "f4", "", "", "", false},
      {rpc::add_artifacts, "f2", "f3", "", "", "", false},
      {rpc::artifact_status, "f2", "f3", "", "", "", false},
      {rpc::interrupt, "f1", "f3", "", "", "", false},
      {rpc::reattach_execute, "f1", "f15", "f12", "", "", true},
      {rpc::release_execute, "f1", "f3", "f2", "", "", false},
      {rpc::release_session, "f1", "f2", "", "", "", false},
      {rpc::fetch_error_details, "f4", "f3", "", "", "", false},
      {rpc::clone_session, "f1", "f2", "", "f3", "f4", false},
      {rpc::get_status, "f1", "f2", "", "", "", false},
      {rpc::unknown, "f1", "", "", "", "", false},
  };
  const enc msg = every_field_response();
  for (const auto& c : cases) {
    INFO(rpc_name(c.r));
    auto f = scan_resp(c.r, msg);
    CHECK(f.session_id == c.session);
    CHECK(f.server_side_session_id == c.server_side);
    CHECK(f.operation_id == c.op);
    CHECK(f.new_session_id == c.new_session);
    CHECK(f.new_server_side_session_id == c.new_server_side);
    CHECK(f.result_complete == c.complete);
  }
}

TEST_CASE("a realistic execute plan request yields its routing fields", "[wire]") {
  auto f = scan_req(rpc::execute_plan, sample_execute());
  CHECK(f.session_id == "session-123");
  CHECK(f.user_id == "bob");
  CHECK(f.operation_id == "op-42");
  CHECK(f.observed_server_session == "server-side-9");
}

TEST_CASE("a known field with another wire type is skipped as unknown", "[wire]") {
  auto f = scan_req(rpc::execute_plan,
                    enc{}.varint(1, 7).fixed64(6).fixed32(8).msg(2, enc{}.varint(1, 5)));
  CHECK(f.session_id.empty());
  CHECK(f.operation_id.empty());
  CHECK(f.observed_server_session.empty());
  CHECK(f.user_id.empty());
  // interrupt_type sent length-delimited is not an interrupt type either.
  CHECK(scan_req(rpc::interrupt, enc{}.str(4, "x")).interrupt_type == 0);
  CHECK_FALSE(scan_resp(rpc::execute_plan, enc{}.varint(14, 1)).result_complete);
}

TEST_CASE("a repeated field keeps its last value and the output is reset", "[wire]") {
  request_fields f;
  f.operation_id = "stale";
  f.release_all = true;
  bytes b = enc{}.str(1, "a").str(1, "b").msg(2, user("u1")).msg(2, enc{}.str(2, "n")).b;
  REQUIRE(scan_request(rpc::execute_plan, one(b), f).ok);
  CHECK(f.session_id == "b");
  CHECK(f.user_id == "u1");  // a later user_context without user_id merges, keeping it
  CHECK(f.operation_id.empty());
  CHECK_FALSE(f.release_all);
}

TEST_CASE("an empty message is valid and carries nothing", "[wire]") {
  request_fields f;
  CHECK(scan_request(rpc::execute_plan, {}, f).ok);
  bytes none;
  CHECK(scan_request(rpc::execute_plan, {segment{none.data(), 0}, segment{nullptr, 0}}, f).ok);
  CHECK(f.session_id.empty());
}

TEST_CASE("a message split at any byte boundary scans the same", "[wire]") {
  const bytes b = sample_execute().b;
  auto check = [](const segments& segs) {
    request_fields f;
    REQUIRE(scan_request(rpc::execute_plan, segs, f).ok);
    CHECK(f.session_id == "session-123");
    CHECK(f.user_id == "bob");
    CHECK(f.operation_id == "op-42");
    CHECK(f.observed_server_session == "server-side-9");
  };
  for (std::size_t i = 0; i <= b.size(); ++i)
    for (std::size_t j = i; j <= b.size(); ++j) check(split(b, {i, j}));
  segments bytewise;
  for (std::size_t i = 0; i < b.size(); ++i) {
    bytewise.push_back(segment{b.data() + i, 1});
    bytewise.push_back(segment{b.data() + i, 0});  // empty segments are harmless
  }
  check(bytewise);
}

TEST_CASE("a message cut short fails unless it ends between fields", "[wire]") {
  const enc e = sample_execute();
  for (std::size_t len = 0; len < e.b.size(); ++len) {
    bytes prefix(e.b.begin(), e.b.begin() + len);
    bool whole = len == 0 || std::find(e.ends.begin(), e.ends.end(), len) != e.ends.end();
    request_fields f;
    auto res = scan_request(rpc::execute_plan, one(prefix), f);
    INFO("length " << len << ": " << res.reason);
    CHECK(res.ok == whole);
    CHECK(res.reason.empty() == whole);
    response_fields rf;
    CHECK(scan_response(rpc::execute_plan, one(prefix), rf).ok == whole);
  }
}

TEST_CASE("a truncated length-delimited field names the field and byte", "[wire]") {
  bytes b = enc{}.str(1, "s").tag(3, 2).raw_varint(10).raw({1, 2, 3}).b;
  request_fields f;
  auto res = scan_request(rpc::execute_plan, one(b), f);
  CHECK_FALSE(res.ok);
  CHECK(res.reason == "truncated length-delimited field 3 at byte 3");
}

TEST_CASE("a routing id longer than the limit fails naming the field", "[wire]") {
  const std::string ok(max_id_bytes, 'x'), big(max_id_bytes + 1, 'x');
  request_fields f;
  CHECK(scan_req(rpc::execute_plan, enc{}.str(1, ok).str(6, ok)).session_id == ok);

  auto fails = [&](rpc r, const enc& e, const std::string& name) {
    auto res = scan_request(r, one(e.b), f);
    CHECK_FALSE(res.ok);
    CHECK(res.reason.find(name) != std::string::npos);
  };
  fails(rpc::execute_plan, enc{}.str(1, big), "session_id (field 1) longer than 1024 bytes");
  fails(rpc::execute_plan, enc{}.str(6, big), "operation_id (field 6)");
  fails(rpc::execute_plan, enc{}.str(8, big), "client_observed_server_side_session_id (field 8)");
  fails(rpc::clone_session, enc{}.str(4, big), "new_session_id (field 4)");
  fails(rpc::execute_plan, enc{}.msg(2, enc{}.str(1, big)), "user_context (field 2): user_id");
  // A long field that is not a routing id is fine.
  CHECK(scan_req(rpc::analyze_plan, enc{}.str(6, big)).operation_id.empty());

  response_fields rf;
  auto res = scan_response(rpc::execute_plan, one(enc{}.str(15, big).b), rf);
  CHECK_FALSE(res.ok);
  CHECK(res.reason.find("server_side_session_id (field 15)") != std::string::npos);
}

TEST_CASE("varints longer than ten bytes are rejected", "[wire]") {
  // Ten bytes is the longest legal varint.
  auto f = scan_req(rpc::interrupt, enc{}.varint(4, UINT64_MAX));
  CHECK(f.interrupt_type == UINT64_MAX);

  bytes b =
      enc{}.tag(4, 0).raw({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}).b;
  request_fields rf;
  auto res = scan_request(rpc::interrupt, one(b), rf);
  CHECK_FALSE(res.ok);
  CHECK(res.reason == "varint longer than 10 bytes at byte 1");

  bytes tag = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
  CHECK_FALSE(scan_request(rpc::interrupt, one(tag), rf).ok);

  bytes cut = enc{}.tag(4, 0).raw({0xff, 0xff}).b;
  res = scan_request(rpc::interrupt, one(cut), rf);
  CHECK(res.reason == "truncated varint at byte 1");
}

TEST_CASE("field numbers outside 1 to 2^29-1 are rejected", "[wire]") {
  request_fields f;
  bytes zero = enc{}.str(1, "s").tag(0, 0).raw_varint(1).b;
  auto res = scan_request(rpc::execute_plan, one(zero), f);
  CHECK_FALSE(res.ok);
  CHECK(res.reason == "invalid field number 0 at byte 3");

  const std::uint64_t max = (1u << 29) - 1;
  CHECK(scan_request(rpc::execute_plan, one(enc{}.varint(max, 1).b), f).ok);
  CHECK_FALSE(scan_request(rpc::execute_plan, one(enc{}.varint(max + 1, 1).b), f).ok);
}

TEST_CASE("wire types 6 and 7 are rejected", "[wire]") {
  for (int type : {6, 7}) {
    bytes b = enc{}.str(1, "s").tag(9, type).raw({0, 0, 0, 0}).b;
    request_fields f;
    auto res = scan_request(rpc::execute_plan, one(b), f);
    CHECK_FALSE(res.ok);
    CHECK(res.reason == "invalid wire type " + std::to_string(type) + " for field 9 at byte 3");
  }
}

TEST_CASE("fixed-width fields are skipped and checked for length", "[wire]") {
  CHECK(scan_req(rpc::execute_plan, enc{}.fixed32(3).fixed64(4).str(1, "s")).session_id == "s");
  request_fields f;
  bytes b = enc{}.tag(3, 1).raw({1, 2, 3, 4, 5, 6, 7}).b;
  auto res = scan_request(rpc::execute_plan, one(b), f);
  CHECK(res.reason == "truncated fixed field 3 at byte 0");
}

TEST_CASE("groups are skipped whole and must be matched", "[wire]") {
  // A group holding every wire type and a nested group, around routing fields.
  enc g;
  g.str(1, "s").tag(5, 3).varint(1, 2).fixed32(2).fixed64(3).str(4, "in-group");
  g.tag(6, 3).str(1, "deeper").tag(6, 4).tag(5, 4).str(6, "op");
  auto f = scan_req(rpc::execute_plan, g);
  CHECK(f.session_id == "s");
  CHECK(f.operation_id == "op");  // field 4 and 1 inside the group were not read

  request_fields rf;
  auto reason = [&](const enc& e) {
    auto res = scan_request(rpc::execute_plan, one(e.b), rf);
    CHECK_FALSE(res.ok);
    return res.reason;
  };
  CHECK(reason(enc{}.str(1, "s").tag(5, 4)) == "unmatched end-group for field 5 at byte 3");
  CHECK(reason(enc{}.tag(5, 3).str(1, "s")) == "unterminated group field 5 at byte 0");
  CHECK(reason(enc{}.tag(5, 3).tag(6, 4)) == "unmatched end-group for field 6 at byte 1");
  // A group cannot close outside the user_context it opened in.
  CHECK(reason(enc{}.msg(2, enc{}.tag(5, 3)).tag(5, 4)) ==
        "user_context (field 2): unterminated group field 5 at byte 2");
}

TEST_CASE("groups nest up to 32 deep", "[wire]") {
  auto nested = [](int depth) {
    enc e;
    for (int i = 0; i < depth; ++i) e.tag(5, 3);  // one-byte tags, so byte offsets are depths
    for (int i = 0; i < depth; ++i) e.tag(5, 4);
    return e.str(1, "s");
  };
  CHECK(scan_req(rpc::execute_plan, nested(32)).session_id == "s");
  request_fields f;
  auto res = scan_request(rpc::execute_plan, one(nested(33).b), f);
  CHECK_FALSE(res.ok);
  CHECK(res.reason == "groups nested deeper than 32 at byte 32");
}

TEST_CASE("a bad user_context fails the request", "[wire]") {
  request_fields f;
  bytes b = enc{}.str(1, "s").msg(2, enc{}.tag(1, 2).raw_varint(50).raw({'a'})).b;
  auto res = scan_request(rpc::execute_plan, one(b), f);
  CHECK_FALSE(res.ok);
  CHECK(res.reason == "user_context (field 2): truncated length-delimited field 1 at byte 5");
}

TEST_CASE("a large skipped field is walked over in place", "[wire]") {
  const std::string plan(1u << 20, 'p');
  bytes b = enc{}.str(1, "s").str(3, plan).str(6, "op").msg(2, user("u")).b;
  // Cut into 64 KiB segments, as gRPC slices arrive.
  std::vector<std::size_t> cuts;
  for (std::size_t c = 65536; c < b.size(); c += 65536) cuts.push_back(c);
  request_fields f;
  REQUIRE(scan_request(rpc::execute_plan, split(b, cuts), f).ok);
  CHECK(f.session_id == "s");
  CHECK(f.operation_id == "op");
  CHECK(f.user_id == "u");
}

TEST_CASE("random bytes never crash the scanner", "[wire]") {
  std::mt19937 rng(20240611);
  const bytes valid = sample_execute().b;
  request_fields f;
  response_fields rf;
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b;
    if (i % 2 == 0) {  // pure noise
      b.resize(rng() % 64);
      for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    } else {  // a valid message with a few bytes flipped: reaches deeper paths
      b = valid;
      for (int k = 0, n = 1 + rng() % 3; k < n; ++k) b[rng() % b.size()] ^= 1u << (rng() % 8);
    }
    std::vector<std::size_t> cuts;
    if (!b.empty())
      for (int k = 0, n = rng() % 3; k < n; ++k) cuts.push_back(rng() % b.size());
    std::sort(cuts.begin(), cuts.end());
    auto segs = split(b, cuts);
    auto r = static_cast<rpc>(rng() % rpc_count);
    auto res = scan_request(r, segs, f);
    CHECK((res.ok ? res.reason.empty() : !res.reason.empty()));
    ok += res.ok;
    auto rres = scan_response(r, segs, rf);
    CHECK((rres.ok ? rres.reason.empty() : !rres.reason.empty()));
    if (res.ok) CHECK(f.session_id.size() <= max_id_bytes);
  }
  CHECK(ok > 0);
}

// --- ExecutePlan commands that wait rather than compute (plan_kind) -------------------

namespace {

/// An ExecutePlanRequest whose plan (3) is `plan`, with an operation id after it.
enc execute_with_plan(const enc& plan) {
  return enc{}.str(1, "s").msg(2, user("u")).msg(3, plan).str(6, "op-after");
}

/// Plan.command (2) holding `command`.
enc command_plan(const enc& command) { return enc{}.msg(2, command); }

/// Command's member `field` holding `member`.
enc command(std::uint64_t field, const enc& member) { return enc{}.msg(field, member); }

/// A StreamingQueryCommand: its query_id (1), then `rest`.
enc query_command(const enc& rest) {
  enc e = enc{}.msg(1, enc{}.str(1, "query-id").str(2, "run-id"));
  e.b.insert(e.b.end(), rest.b.begin(), rest.b.end());
  return e;
}

plan_kind kind_of(const enc& plan) {
  auto f = scan_req(rpc::execute_plan, execute_with_plan(plan));
  CHECK(f.operation_id == "op-after");  // the plan was walked over whole
  return f.plan;
}

}  // namespace

TEST_CASE("the listener bus command waits, whether it adds or removes the listener", "[wire]") {
  CHECK(kind_of(command_plan(command(11, enc{}.varint(1, 1)))) == plan_kind::listener_bus);
  CHECK(kind_of(command_plan(command(11, enc{}.varint(2, 1)))) == plan_kind::listener_bus);
  CHECK(waits(plan_kind::listener_bus));
  CHECK(plan_kind_name(plan_kind::listener_bus) == "listener_bus");
}

TEST_CASE("awaitTermination and processAllAvailable wait, the other query commands compute", "[wire]") {
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.msg(9, enc{}.varint(2, 5000)))))) ==
        plan_kind::await_termination);
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.msg(9, enc{}))))) == plan_kind::await_termination);
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.varint(6, 1))))) ==
        plan_kind::process_all_available);
  for (std::uint64_t other : {2, 3, 4, 5, 8})  // status, lastProgress, recentProgress, stop, exception
    CHECK(kind_of(command_plan(command(7, query_command(enc{}.varint(other, 1))))) == plan_kind::compute);
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.msg(7, enc{}.varint(1, 1)))))) ==
        plan_kind::compute);  // explain
  CHECK(kind_of(command_plan(command(7, query_command(enc{})))) == plan_kind::compute);  // no command at all
}

TEST_CASE("awaitAnyTermination waits, the other query manager commands compute", "[wire]") {
  CHECK(kind_of(command_plan(command(9, enc{}.msg(3, enc{}.varint(1, 100))))) ==
        plan_kind::await_any_termination);
  CHECK(kind_of(command_plan(command(9, enc{}.varint(1, 1)))) == plan_kind::compute);     // active
  CHECK(kind_of(command_plan(command(9, enc{}.str(2, "id")))) == plan_kind::compute);     // get
  CHECK(kind_of(command_plan(command(9, enc{}.msg(5, enc{}.str(3, "l"))))) == plan_kind::compute);  // addListener
}

TEST_CASE("a pipeline's signal stream waits, its run computes", "[wire]") {
  CHECK(kind_of(command_plan(command(19, enc{}.msg(7, enc{}.str(1, "graph").str(2, "client"))))) ==
        plan_kind::pipeline_signals);
  CHECK(kind_of(command_plan(command(19, enc{}.msg(5, enc{}.str(1, "graph"))))) == plan_kind::compute);
}

TEST_CASE("a relation, a compressed plan and every other command compute", "[wire]") {
  CHECK(kind_of(enc{}.msg(1, enc{}.msg(1, enc{}.varint(1, 7)))) == plan_kind::compute);  // root
  CHECK(kind_of(enc{}.msg(3, enc{}.str(1, "zstd bytes").varint(2, 2))) == plan_kind::compute);
  for (std::uint64_t member : {1, 2, 3, 4, 5, 6, 8, 10, 12, 13, 14, 15, 16, 17, 18, 999})
    CHECK(kind_of(command_plan(command(member, enc{}.varint(1, 1)))) == plan_kind::compute);
  CHECK(kind_of(enc{}) == plan_kind::compute);
  CHECK(scan_req(rpc::execute_plan, sample_execute()).plan == plan_kind::compute);
}

TEST_CASE("the last member of each oneof decides, as protobuf reads it", "[wire]") {
  const enc bus = command(11, enc{}.varint(1, 1));
  enc bus_then_root = command_plan(bus);
  bus_then_root.msg(1, enc{}.varint(1, 1));
  CHECK(kind_of(bus_then_root) == plan_kind::compute);
  enc root_then_bus = enc{}.msg(1, enc{}.varint(1, 1));
  root_then_bus.msg(2, bus);
  CHECK(kind_of(root_then_bus) == plan_kind::listener_bus);
  enc bus_then_sql = bus;
  bus_then_sql.msg(5, enc{}.str(1, "select 1"));
  CHECK(kind_of(command_plan(bus_then_sql)) == plan_kind::compute);
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.msg(9, enc{}).varint(2, 1))))) == plan_kind::compute);
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.varint(2, 1).msg(9, enc{}))))) ==
        plan_kind::await_termination);
}

TEST_CASE("a waiting field of another wire type, or in another rpc, does not wait", "[wire]") {
  CHECK(kind_of(command_plan(command(7, query_command(enc{}.str(6, "x"))))) == plan_kind::compute);
  CHECK(kind_of(command_plan(command(9, enc{}.varint(3, 1)))) == plan_kind::compute);
  CHECK(kind_of(command_plan(enc{}.varint(11, 1))) == plan_kind::compute);
  CHECK(kind_of(enc{}.varint(2, 1)) == plan_kind::compute);
  const enc plan = command_plan(command(11, enc{}.varint(1, 1)));
  for (rpc r : {rpc::analyze_plan, rpc::config, rpc::reattach_execute, rpc::unknown})
    CHECK(scan_req(r, enc{}.msg(3, plan)).plan == plan_kind::compute);
}

TEST_CASE("a plan that is not a valid message computes and the request still scans", "[wire]") {
  // Inside the plan: a truncated field, an unmatched end-group, a bad wire type, a
  // truncated varint after a listener bus command.
  for (auto inner : {bytes{0x12, 0x05, 0x5a}, bytes{0x12, 0x02, 0x5c, 0x00}, bytes{0x12, 0x02, 0x5f, 0x01},
                     bytes{0x12, 0x04, 0x5a, 0x00, 0x08, 0x80}}) {
    enc plan;
    plan.b = inner;
    auto f = scan_req(rpc::execute_plan, execute_with_plan(plan));
    CHECK(f.plan == plan_kind::compute);
    CHECK(f.operation_id == "op-after");
  }
}

TEST_CASE("a waiting plan split at any byte boundary is read the same", "[wire]") {
  const bytes b = execute_with_plan(command_plan(command(7, query_command(enc{}.msg(9, enc{}.varint(2, 9)))))).b;
  for (std::size_t i = 0; i <= b.size(); ++i) {
    request_fields f;
    REQUIRE(scan_request(rpc::execute_plan, split(b, {i}), f).ok);
    CHECK(f.plan == plan_kind::await_termination);
    CHECK(f.operation_id == "op-after");
  }
}
