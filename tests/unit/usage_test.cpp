#include "core/usage.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "core/protowire.hpp"
#include "net/wire.hpp"

using namespace scg;
using core::call_usage;
using core::usage_ledger;

namespace {

constexpr std::int64_t minute = 60000;
constexpr std::int64_t t0 = 1000 * minute;  // a whole minute, so offsets below stay inside it

call_usage execution(std::uint64_t ms, std::uint64_t bytes, std::uint64_t rows) {
  call_usage u;
  u.method = core::rpc::execute_plan;
  u.execution = true;
  u.execution_ms = ms;
  u.result_bytes = bytes;
  u.result_rows = rows;
  return u;
}

const usage_ledger::tenant_totals* find(const std::vector<usage_ledger::tenant_totals>& all, const std::string& t) {
  for (const auto& x : all)
    if (x.tenant == t) return &x;
  return nullptr;
}

}  // namespace

TEST_CASE("a tenant's totals add up its calls, sessions and rejections by reason", "[usage]") {
  usage_ledger l;
  l.record_session("a", "alice", t0);
  l.record_call("a", "alice", execution(1500, 300, 7), t0 + 1);
  l.record_call("a", "bob", execution(500, 100, 3), t0 + 2);
  call_usage refused;
  refused.method = core::rpc::execute_plan;
  refused.rejection = core::local_reason::rate_limited;
  l.record_call("a", "bob", refused, t0 + 3);
  l.record_call("b", "carol", call_usage{core::rpc::config}, t0 + 4);

  const auto all = l.totals();
  REQUIRE(all.size() == 2);
  const auto* a = find(all, "a");
  REQUIRE(a);
  CHECK(a->figures.sessions == 1);
  CHECK(a->figures.executions == 2);
  CHECK(a->figures.execution_ms == 2000);
  CHECK(a->figures.result_bytes == 400);
  CHECK(a->figures.result_rows == 10);
  CHECK(a->figures.rpcs == 3);
  CHECK(a->figures.rejections == 1);
  CHECK(a->rpcs[core::rpc_index(core::rpc::execute_plan)] == 3);
  CHECK(a->rejections[static_cast<std::size_t>(core::local_reason::rate_limited)] == 1);
  CHECK(find(all, "b")->rpcs[core::rpc_index(core::rpc::config)] == 1);
}

TEST_CASE("tenants beyond max_tenants count under _other, and each overflow is counted", "[usage]") {
  usage_ledger l({2, 1000, 0});
  for (int i = 0; i < 5; ++i) l.record_call("t" + std::to_string(i), "u", call_usage{}, t0);
  l.record_call("t0", "u", call_usage{}, t0);  // a kept tenant stays kept
  l.record_call("", "", call_usage{}, t0);     // no tenant: not a tenant, not an overflow
  const auto all = l.totals();
  REQUIRE(all.size() == 4);  // t0, t1, _none, _other
  CHECK(find(all, "t0")->figures.rpcs == 2);
  CHECK(find(all, "t1")->figures.rpcs == 1);
  CHECK(find(all, "_other")->figures.rpcs == 3);
  CHECK(find(all, "_none")->figures.rpcs == 1);
  CHECK_FALSE(find(all, "t4"));
  CHECK(l.tenant_overflows() == 3);
  // Their users are kept under the "_other" tenant.
  auto users = l.window(true, 60, t0, 100);
  REQUIRE(users.size() == 3);
  CHECK(users[0].tenant == "_other");
  CHECK(users[0].figures.rpcs == 3);
}

TEST_CASE("users beyond max_users count as user _other of their tenant", "[usage]") {
  usage_ledger l({10, 2, 0});
  l.record_call("a", "u1", call_usage{}, t0);
  l.record_call("a", "u2", call_usage{}, t0);
  l.record_call("a", "u3", call_usage{}, t0);
  l.record_call("b", "u4", call_usage{}, t0);
  l.record_call("a", "u1", call_usage{}, t0);
  auto users = l.window(true, 60, t0, 100);
  REQUIRE(users.size() == 4);
  CHECK(users[0].tenant == "a");
  CHECK(users[0].user == "u1");
  CHECK(users[0].figures.rpcs == 2);
  CHECK(users[1].tenant == "a");  // a's u3; ties rank by name ("_other" before "u2")
  CHECK(users[1].user == "_other");
  CHECK(users[2].user == "u2");
  CHECK(users[3].tenant == "b");  // b's u4
  CHECK(users[3].user == "_other");
  CHECK(l.user_overflows() == 2);
}

TEST_CASE("a window sums the minutes it covers and nothing older", "[usage]") {
  usage_ledger l;
  l.record_call("a", "u", execution(1000, 10, 1), t0);                // minute 0
  l.record_call("a", "u", execution(1000, 20, 2), t0 + 5 * minute);   // minute 5
  l.record_call("a", "u", execution(1000, 40, 4), t0 + 14 * minute);  // minute 14
  const auto now = t0 + 14 * minute + 30000;
  auto rows = l.window(false, 1, now, 10);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].figures.result_rows == 4);
  CHECK(l.window(false, 10, now, 10)[0].figures.result_rows == 6);
  CHECK(l.window(false, 15, now, 10)[0].figures.result_rows == 7);
  // An hour later the ring has moved on: nothing in a 15-minute window.
  CHECK(l.window(false, 15, now + 60 * minute, 10).empty());
  // A bucket reused for a later minute forgets the old one.
  l.record_call("a", "u", execution(1000, 80, 8), t0 + 60 * minute);  // minute 60 reuses minute 0's bucket
  CHECK(l.window(false, 60, t0 + 60 * minute, 10)[0].figures.result_rows == 2 + 4 + 8);
  // Totals keep everything.
  CHECK(l.totals()[0].figures.result_rows == 15);
}

TEST_CASE("window rows are the largest by RPCs, bounded by the limit, filtered by tenant", "[usage]") {
  usage_ledger l;
  for (int i = 0; i < 3; ++i) l.record_call("a", "x", call_usage{}, t0);
  for (int i = 0; i < 5; ++i) l.record_call("b", "y", call_usage{}, t0);
  l.record_call("c", "z", call_usage{}, t0);
  std::size_t total = 0;
  auto rows = l.window(false, 15, t0, 2, &total);
  CHECK(total == 3);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].tenant == "b");
  CHECK(rows[1].tenant == "a");
  auto only_a = l.window(true, 15, t0, 10, nullptr, "a");
  REQUIRE(only_a.size() == 1);
  CHECK(only_a[0].user == "x");
}

TEST_CASE("top_users ranks users by RPCs since start", "[usage]") {
  usage_ledger l;
  l.record_call("a", "x", call_usage{}, t0);
  for (int i = 0; i < 4; ++i) l.record_call("b", "y", call_usage{}, t0);
  for (int i = 0; i < 2; ++i) l.record_call("a", "w", call_usage{}, t0);
  CHECK(l.top_users(0).empty());
  auto top = l.top_users(2);
  REQUIRE(top.size() == 2);
  CHECK(top[0].user == "y");
  CHECK(top[1].user == "w");
}

// --- arrow_rows_reader: row_count out of ExecutePlanResponse bytes as they pass

namespace {

namespace pw = core::protowire;

std::string batch_response(std::uint64_t rows, std::size_t data_bytes, bool data_first = false) {
  std::string batch;
  if (data_first) pw::put_bytes(batch, 2, std::string(data_bytes, 'd'));
  pw::put_uint(batch, 1, rows);
  if (!data_first) pw::put_bytes(batch, 2, std::string(data_bytes, 'd'));
  std::string msg;
  pw::put_bytes(msg, 1, "00112233-4455-6677-8899-aabbccddeeff");
  pw::put_bytes(msg, 2, batch);
  pw::put_bytes(msg, 12, "op-1");
  pw::put_bytes(msg, 15, "server-session");
  return msg;
}

std::uint64_t rows_in_pieces(const std::string& msg, std::size_t piece) {
  net::arrow_rows_reader r;
  r.start(msg.size());
  for (std::size_t i = 0; i < msg.size(); i += piece)
    r.feed(reinterpret_cast<const std::uint8_t*>(msg.data()) + i, std::min(piece, msg.size() - i));
  return r.rows();
}

}  // namespace

TEST_CASE("the row reader finds arrow_batch.row_count however the bytes are split", "[usage][wire]") {
  const auto msg = batch_response(123456789, 5000);
  for (std::size_t piece : {1, 2, 3, 7, 64, 4096, 100000}) {
    INFO("piece " << piece);
    CHECK(rows_in_pieces(msg, piece) == 123456789);
  }
  CHECK(rows_in_pieces(batch_response(42, 300, true), 5) == 42);  // data before the count
}

TEST_CASE("the row reader counts 0 for responses without a batch and for bytes it cannot read", "[usage][wire]") {
  std::string complete;
  pw::put_bytes(complete, 1, "s");
  pw::put_bytes(complete, 14, "");  // result_complete
  pw::put_bytes(complete, 15, "ss");
  CHECK(rows_in_pieces(complete, 1) == 0);
  std::string metrics;
  pw::put_bytes(metrics, 1, "s");
  pw::put_bytes(metrics, 4, std::string("\x0a\x03" "abc", 5));  // metrics { metrics { name } }
  CHECK(rows_in_pieces(metrics, 3) == 0);
  std::string group;
  pw::put_tag(group, 3, 3);  // a start-group: not in these messages, given up
  group += std::string(10, '\xff');
  CHECK(rows_in_pieces(group, 2) == 0);
  CHECK(rows_in_pieces(std::string(20, '\xff'), 4) == 0);  // a varint that never ends
  const auto msg = batch_response(9, 100);
  CHECK(rows_in_pieces(msg.substr(0, msg.size() / 2), 3) == 9);  // cut inside the data: the count came first
}

TEST_CASE("threads record into their own shards and readers add them up, bounds across shards", "[usage]") {
  usage_ledger l({2, 1000, 0});
  auto work = [&](const std::string& extra) {
    for (int i = 0; i < 1000; ++i) l.record_call("a", "u", execution(1, 2, 3), t0);
    l.record_call(extra, "v", call_usage{}, t0);
  };
  std::thread x(work, "b"), y(work, "c");
  x.join();
  y.join();
  const auto all = l.totals();
  REQUIRE(find(all, "a"));
  CHECK(find(all, "a")->figures.result_rows == 6000);
  CHECK(find(all, "a")->figures.rpcs == 2000);
  // One of b and c was the second tenant, the other went to _other.
  REQUIRE(find(all, "_other"));
  CHECK(find(all, "_other")->figures.rpcs == 1);
  CHECK(l.tenant_overflows() == 1);
  auto rows = l.window(false, 60, t0, 10);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].tenant == "a");
  CHECK(rows[0].figures.execution_ms == 2000);
}
