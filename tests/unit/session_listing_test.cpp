// The admin API's read-only view of the session table: key parsing and paged
// listings.
#include <catch2/catch.hpp>

#include <set>
#include <thread>

#include "actors/session_table.hpp"

using scg::actors::backend_index;
using scg::actors::session_key;
using scg::actors::session_table;

namespace {
auto any_session = [](std::string_view, backend_index) { return true; };
auto any_op = [](std::string_view, const session_table::op_entry&) { return true; };
}  // namespace

TEST_CASE("a session key parses back into its parts", "[table][listing]") {
  for (const session_key& k : {session_key{"", "alice", "s-1"}, session_key{"team-a", "bob", "x"},
                               session_key{"t:1", "u:2", "3:4"}, session_key{"", "", ""}}) {
    auto back = session_key::parse(k.str());
    REQUIRE(back);
    CHECK(back->tenant == k.tenant);
    CHECK(back->user_id == k.user_id);
    CHECK(back->session_id == k.session_id);
  }
}

TEST_CASE("strings that are not session keys do not parse", "[table][listing]") {
  for (const char* bad : {"", "k", "0:", "0:0:", "0:0:0:x", "1:0:0:", "x:0:0:", "99:ab:0:0:", "0:5:abc0:"})
    CHECK_FALSE(session_key::parse(bad));
}

TEST_CASE("sessions list in key order, page by page, each exactly once", "[table][listing]") {
  session_table t{2};
  for (int i = 0; i < 250; ++i)
    t.bind_session(session_key{"", "u", "s" + std::to_string(i)}.str(), i % 2, 1000 + i);
  std::set<std::string> seen;
  std::string after;
  int pages = 0;
  for (;;) {
    auto page = t.list_sessions(after, 100, any_session);
    for (std::size_t i = 1; i < page.size(); ++i) CHECK(page[i - 1].key < page[i].key);
    for (const auto& r : page) CHECK(seen.insert(r.key).second);
    ++pages;
    if (page.size() < 100) break;
    after = page.back().key;
  }
  CHECK(pages == 3);
  CHECK(seen.size() == 250);
}

TEST_CASE("a listing keeps only what the filter accepts and reports backend and last seen",
          "[table][listing]") {
  session_table t{3};
  t.bind_session(session_key{"", "ann", "a"}.str(), 0, 10);
  t.bind_session(session_key{"", "bob", "b"}.str(), 2, 20);
  t.bind_session(session_key{"", "cat", "c"}.str(), 2, 30);
  auto on_2 = t.list_sessions("", 10, [](std::string_view, backend_index b) { return b == 2; });
  REQUIRE(on_2.size() == 2);
  CHECK(on_2[0].key == session_key{"", "bob", "b"}.str());
  CHECK(on_2[0].backend == 2);
  CHECK(on_2[0].last_seen == 20);
  CHECK(t.list_sessions("", 0, any_session).empty());
}

TEST_CASE("operations list in id order and count per session", "[table][listing]") {
  session_table t{2};
  const auto s1 = session_key{"", "u", "s1"}.str();
  const auto s2 = session_key{"", "u", "s2"}.str();
  t.add_op("op-3", 1, s1, 5);
  t.add_op("op-1", 0, s1, 5);
  t.add_op("op-2", 0, s2, 5);
  auto page = t.list_ops("", 2, any_op);
  REQUIRE(page.size() == 2);
  CHECK(page[0].key == "op-1");
  CHECK(page[1].key == "op-2");
  CHECK(page[1].op.session == s2);
  auto rest = t.list_ops("op-2", 2, any_op);
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].key == "op-3");
  CHECK(rest[0].op.backend == 1);

  std::unordered_map<std::string, std::size_t> counts{{s1, 0}, {s2, 0}, {"other", 0}};
  t.count_ops(counts);
  CHECK(counts[s1] == 2);
  CHECK(counts[s2] == 1);
  CHECK(counts["other"] == 0);

  // The counts follow erasures and expiry, and an op seen again counts once.
  t.add_op("op-1", 0, s1, 9);
  CHECK(t.erase_op("op-3"));
  CHECK_FALSE(t.erase_op("op-3"));
  CHECK(t.expire_ops(20, 12) == 1);  // op-2 (seen at 5); op-1 was seen at 9
  counts = {{s1, 0}, {s2, 0}};
  t.count_ops(counts);
  CHECK(counts[s1] == 1);
  CHECK(counts[s2] == 0);
  CHECK(t.expire_ops(100, 12) == 1);
  counts = {{s1, 0}};
  t.count_ops(counts);
  CHECK(counts[s1] == 0);
  t.add_op("op-4", 0, s1, 100);  // a session's count starts again after it fell to 0
  t.count_ops(counts);
  CHECK(counts[s1] == 1);
}

TEST_CASE("listing while other threads bind and erase neither crashes nor repeats a key",
          "[table][listing]") {
  session_table t{2};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      auto key = session_key{"", "w", std::to_string(i % 500)}.str();
      if (i % 3 == 2) t.erase_session(key); else t.bind_session(key, i % 2, i);
    }
  });
  for (int round = 0; round < 50; ++round) {
    std::set<std::string> seen;
    std::string after;
    for (;;) {
      auto page = t.list_sessions(after, 64, any_session);
      for (const auto& r : page) CHECK(seen.insert(r.key).second);
      if (page.size() < 64) break;
      after = page.back().key;
    }
  }
  stop = true;
  writer.join();
}
