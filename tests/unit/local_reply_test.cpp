// The one table of answers scg gives itself (core/local_reply.hpp): each
// reason has one code, one counter and one name, and the docs list them all.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "core/local_reply.hpp"
#include "core/metrics.hpp"

using namespace scg::core;

TEST_CASE("every local reason has its row, a real error code and a counter", "[local_reply]") {
  std::set<std::string_view> names;
  std::size_t index = 0;
  for (const auto& row : local_replies()) {
    INFO(row.name);
    CHECK(static_cast<std::size_t>(row.reason) == index++);
    CHECK(&reply_of(row.reason) == &row);
    CHECK(names.insert(row.name).second);
    CHECK(row.code > 0);  // never OK
    CHECK(row.code <= 16);
    CHECK(row.counter != nullptr);
    CHECK(row.what.size() > 10);
    // A "retry later" answer is a limit doing its job: RESOURCE_EXHAUSTED with RetryInfo.
    if (row.retry_later) CHECK(row.code == grpc_code::resource_exhausted);
  }
  CHECK(index == local_reason_count);
}

TEST_CASE("docs/observability.md lists every local reason", "[local_reply]") {
  std::ifstream in(std::string(SCG_SOURCE_DIR) + "/docs/observability.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& row : local_replies()) {
    INFO(row.name);
    CHECK(text.str().find("| `" + std::string(row.name) + "` |") != std::string::npos);
  }
}

TEST_CASE("a local answer counts its reason and its specific counter", "[local_reply]") {
  auto& m = global_metrics();
  const auto reason_before = m.local_replies[static_cast<std::size_t>(local_reason::executions_full)].load();
  const auto specific_before = m.executions_refused_total.load();
  count_local_reply(local_reason::executions_full);
  CHECK(m.local_replies[static_cast<std::size_t>(local_reason::executions_full)].load() == reason_before + 1);
  CHECK(m.executions_refused_total.load() == specific_before + 1);
  std::string text;
  m.render(text);
  CHECK(text.find("scg_local_replies_total{reason=\"executions_full\"} " + std::to_string(reason_before + 1)) !=
        std::string::npos);
  CHECK(text.find("scg_local_replies_total{reason=\"not_grpc\"} ") != std::string::npos);  // zeros are series too
}

TEST_CASE("a backend's reset maps to one reason by its HTTP/2 code", "[local_reply]") {
  CHECK(reason_of_reset(0x7, false) == local_reason::backend_refused_stream);
  CHECK(reason_of_reset(0x8, false) == local_reason::backend_cancelled);
  CHECK(reason_of_reset(0xb, false) == local_reason::backend_calm);
  CHECK(reason_of_reset(0xc, false) == local_reason::backend_insecure);
  CHECK(reason_of_reset(0x2, false) == local_reason::backend_reset);
  CHECK(reason_of_reset(0x7, true) == local_reason::backend_broke_off);  // the connection went: its code says nothing
  CHECK(reply_of(local_reason::backend_refused_stream).code == grpc_code::unavailable);
  CHECK(reply_of(local_reason::backend_reset).code == grpc_code::internal);
}

TEST_CASE("a backend's grpc-status is read strictly", "[local_reply]") {
  CHECK(parse_grpc_status("0") == 0);
  CHECK(parse_grpc_status("3") == 3);
  CHECK(parse_grpc_status("16") == 16);
  CHECK(parse_grpc_status("08") == 8);
  for (std::string_view bad : {"", "17", "99", "-1", "+3", " 3", "3 ", "abc", "1a", "100", "0x3"}) {
    INFO('"' << bad << '"');
    CHECK_FALSE(parse_grpc_status(bad));
  }
}
