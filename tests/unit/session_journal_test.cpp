// Session journals (net/session_journal.hpp): what requests mean for them,
// and how entries replace each other, from wire bytes built here.
#include <catch2/catch.hpp>

#include "core/protowire.hpp"
#include "net/session_journal.hpp"

using namespace scg::net;
namespace pw = scg::core::protowire;
using kind = journal_verdict::kind;

namespace {

segments seg(const std::string& s) { return {{reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}}; }

std::string msg(std::uint32_t field, const std::string& payload) {
  std::string out;
  pw::put_bytes(out, field, payload);
  return out;
}

/// An ExecutePlanRequest for session s-1 whose plan's command is `member` with body `command`.
std::string execute(std::uint32_t member, const std::string& command, const std::string& extra = "") {
  std::string req = msg(1, "s-1") + msg(2, msg(1, "alice")) + msg(3, msg(2, msg(member, command)));
  return req + extra;
}

std::string sql(const std::string& text) { return execute(5, msg(6, msg(10, msg(1, text)))); }

std::string config_set(std::vector<std::pair<std::string, std::string>> pairs) {
  std::string set;
  for (auto& [k, v] : pairs) set += msg(1, msg(1, k) + msg(2, v));
  return msg(1, "s-1") + msg(2, msg(1, "alice")) + msg(3, msg(1, set));
}

std::string config_unset(std::vector<std::string> keys) {
  std::string unset;
  for (auto& k : keys) unset += msg(1, k);
  return msg(1, "s-1") + msg(2, msg(1, "alice")) + msg(3, msg(6, unset));
}

journal_verdict of(rpc r, const std::string& bytes) { return classify_request(r, seg(bytes)); }

}  // namespace

TEST_CASE("SQL that changes a session is told from SQL that does not", "[session_journal]") {
  struct row {
    const char* sql;
    kind what;
    std::vector<std::string> names;
  };
  const row rows[] = {
      {"SET spark.sql.shuffle.partitions=7", kind::record, {"conf:spark.sql.shuffle.partitions"}},
      {"  -- a comment\n set `a.b` = 'x y';", kind::record, {"conf:a.b"}},
      {"/* c */ SET TIME ZONE 'UTC'", kind::record, {"conf:spark.sql.session.timeZone"}},
      {"SET", kind::none, {}},
      {"SET -v", kind::none, {}},
      {"SET spark.sql.shuffle.partitions", kind::none, {}},
      {"SET VAR system.session.v = 3", kind::record, {"var:v"}},
      {"RESET", kind::forget, {"conf:"}},
      {"reset spark.sql.ansi.enabled", kind::forget, {"conf:spark.sql.ansi.enabled"}},
      {"USE sales", kind::record, {"db"}},
      {"USE CATALOG spark_catalog", kind::record, {"catalog", "db"}},
      {"CREATE OR REPLACE TEMP VIEW V1 AS SELECT 1", kind::record, {"view:v1"}},
      {"CREATE TEMPORARY VIEW IF NOT EXISTS `My View` AS SELECT 1", kind::record, {"view:my view"}},
      {"CREATE VIEW persistent AS SELECT 1", kind::none, {}},
      {"CREATE TABLE t (a INT)", kind::none, {}},
      {"CREATE TEMPORARY FUNCTION f AS 'com.example.F'", kind::record, {"func:f"}},
      {"DECLARE OR REPLACE VARIABLE x INT DEFAULT 1", kind::record, {"var:x"}},
      {"DECLARE y = 2", kind::record, {"var:y"}},
      {"ADD JAR /tmp/a.jar", kind::record, {"add:JAR:/tmp/a.jar"}},
      {"DROP VIEW IF EXISTS v1", kind::forget, {"view:v1"}},
      {"DROP TEMPORARY FUNCTION f", kind::forget, {"func:f"}},
      {"DROP TEMPORARY VARIABLE session.x", kind::forget, {"var:x"}},
      {"DROP TABLE t", kind::none, {}},
      {"SELECT * FROM range(10)", kind::none, {}},
      {"", kind::none, {}},
  };
  for (const auto& r : rows) {
    INFO(r.sql);
    auto v = classify_sql(r.sql);
    CHECK(v.what == r.what);
    CHECK(v.names == r.names);
  }
  CHECK(classify_sql("USE db1").optional);
  CHECK(classify_sql("CREATE GLOBAL TEMPORARY VIEW g AS SELECT 1").why == unreplayable::global_view);
  CHECK(classify_sql("BEGIN SELECT 1; END").why == unreplayable::sql_script);
}

TEST_CASE("Config and ExecutePlan commands are read from their wire bytes", "[session_journal]") {
  auto v = of(rpc::config, config_set({{"a", "1"}, {"b", "2"}}));
  CHECK(v.what == kind::record);
  CHECK(v.names == std::vector<std::string>{"conf:a", "conf:b"});
  v = of(rpc::config, config_unset({"a"}));
  CHECK(v.what == kind::forget);
  CHECK(v.names == std::vector<std::string>{"conf:a"});
  // get_option (4) changes nothing.
  CHECK(of(rpc::config, msg(1, "s-1") + msg(3, msg(4, ""))).what == kind::none);

  CHECK(of(rpc::execute_plan, sql("SET x=1")).names == std::vector<std::string>{"conf:x"});
  // Before 4.0 the text is SqlCommand.sql (1).
  CHECK(of(rpc::execute_plan, execute(5, msg(1, "CREATE TEMP VIEW w AS SELECT 1"))).names ==
        std::vector<std::string>{"view:w"});
  // A DataFrame's view (create_dataframe_view 3: input 1, name 2, is_global 3).
  std::string view = msg(1, msg(11, "local-data")) + msg(2, "People");
  CHECK(of(rpc::execute_plan, execute(3, view)).names == std::vector<std::string>{"view:people"});
  std::string global = view;
  pw::put_uint(global, 3, 1);
  CHECK(of(rpc::execute_plan, execute(3, global)).why == unreplayable::global_view);
  CHECK(of(rpc::execute_plan, execute(1, msg(1, "Plus_One"))).names == std::vector<std::string>{"func:plus_one"});
  CHECK(of(rpc::execute_plan, execute(12, msg(1, "my_source"))).names == std::vector<std::string>{"source:my_source"});
  CHECK(of(rpc::execute_plan, execute(14, msg(1, ""))).why == unreplayable::checkpoint);
  CHECK(of(rpc::execute_plan, execute(17, msg(1, ""))).why == unreplayable::ml_model);
  CHECK(of(rpc::execute_plan, execute(6, msg(1, ""))).why == unreplayable::streaming);
  // A query (Plan.root 1), bad bytes and other rpcs mean nothing.
  CHECK(of(rpc::execute_plan, msg(1, "s-1") + msg(3, msg(1, msg(10, msg(1, "SET x=1"))))).what == kind::none);
  CHECK(of(rpc::execute_plan, std::string("\x1a\x7f", 2)).what == kind::none);
  CHECK(of(rpc::analyze_plan, sql("SET x=1")).what == kind::none);
}

TEST_CASE("The journal form keeps only what a replay sends", "[session_journal]") {
  std::string extra;
  pw::put_bytes(extra, 6, "op-id");
  pw::put_bytes(extra, 8, "observed-id");
  pw::put_bytes(extra, 5, "options");
  const auto full = sql("SET x=1") + extra;
  const auto form = journal_form(seg(full));
  CHECK(form == sql("SET x=1"));
}

TEST_CASE("A later definition replaces an earlier one, and an undo removes it", "[session_journal]") {
  session_journal j;
  auto add = [&](const std::string& bytes, rpc r = rpc::execute_plan) {
    j.apply(classify_request(r, seg(bytes)), r, journal_form(seg(bytes)));
  };
  add(sql("SET a=1"));
  add(sql("CREATE TEMP VIEW v AS SELECT 1"));
  add(sql("SET a=2"));
  REQUIRE(j.entries().size() == 2);
  CHECK(j.entries()[0].names == std::vector<std::string>{"view:v"});
  CHECK(j.entries()[1].request == sql("SET a=2"));
  add(sql("DROP VIEW v"));
  REQUIRE(j.entries().size() == 1);
  add(sql("RESET"));
  CHECK(j.entries().empty());
  CHECK(j.bytes() == 0);

  // An undo of part of an entry keeps the entry and follows it.
  add(config_set({{"a", "1"}, {"b", "2"}}), rpc::config);
  add(config_unset({"a"}), rpc::config);
  REQUIRE(j.entries().size() == 2);
  CHECK(j.entries()[0].names == std::vector<std::string>{"conf:b"});
  CHECK(j.entries()[1].names == std::vector<std::string>{"conf:a"});
  std::size_t bytes = 0;
  for (const auto& e : j.entries()) bytes += e.request.size();
  CHECK(j.bytes() == bytes);

  // Unreplayable: entries go, and stay gone.
  add(execute(14, msg(1, "")));
  CHECK(j.why_not() == unreplayable::checkpoint);
  CHECK(j.entries().empty());
  add(sql("SET c=3"));
  CHECK(j.entries().empty());
  CHECK(j.why_not() == unreplayable::checkpoint);
}

TEST_CASE("The store bounds a session's journal and all of them", "[session_journal]") {
  journal_store store({200, 450}, nullptr);
  auto rec = [&](const std::string& key, const std::string& bytes) {
    store.record(key, classify_request(rpc::execute_plan, seg(bytes)), rpc::execute_plan, journal_form(seg(bytes)));
  };
  rec("k1", sql("SET a=" + std::string(100, 'x')));
  CHECK(store.why_not("k1") == unreplayable::none);
  rec("k1", sql("SET b=" + std::string(100, 'x')));
  CHECK(store.why_not("k1") == unreplayable::too_large);
  CHECK(store.snapshot("k1").entries.empty());
  CHECK(store.bytes() == 0);
  for (int i = 0; i < 4; ++i) rec("k" + std::to_string(i + 2), sql("SET a=" + std::string(100, 'x')));
  CHECK(store.bytes() <= 450);
  CHECK(store.why_not("k5") == unreplayable::store_full);
  const auto counts = store.unreplayable_sessions();
  CHECK(counts[static_cast<std::size_t>(unreplayable::too_large)] == 1);
  CHECK(counts[static_cast<std::size_t>(unreplayable::store_full)] == 1);

  // Ids of a replayed session; a release forgets everything.
  CHECK(!store.ids("k2"));
  store.set_ids("k2", {"client-id", "server-id", 1});
  REQUIRE(store.ids("k2"));
  CHECK(store.ids("k2")->server == "server-id");
  store.forget("k2");
  CHECK(!store.ids("k2"));
  CHECK(store.snapshot("k2").entries.empty());
}

TEST_CASE("One replay per session runs, and the others wait for its end", "[session_journal]") {
  journal_store store({}, nullptr);
  int woken = 0;
  CHECK(store.begin_replay("k", [&] { ++woken; }));
  CHECK(!store.begin_replay("k", [&] { ++woken; }));
  CHECK(!store.begin_replay("k", [&] { ++woken; }));
  CHECK(store.begin_replay("other", [] {}));
  store.end_replay("k");
  CHECK(woken == 2);
  CHECK(store.begin_replay("k", [&] { ++woken; }));
}

TEST_CASE("An id is overwritten in place, only where it is the one named", "[session_journal]") {
  std::string body = msg(1, "session") + msg(15, "aaaa") + msg(4, "bbbb");
  std::string copy = body;
  // Across two segments, split inside the value.
  segments two{{reinterpret_cast<const std::uint8_t*>(copy.data()), 11},
               {reinterpret_cast<const std::uint8_t*>(copy.data()) + 11, copy.size() - 11}};
  CHECK(overwrite_id(two, 15, "aaaa", "zzzz"));
  CHECK(copy == msg(1, "session") + msg(15, "zzzz") + msg(4, "bbbb"));
  CHECK(!overwrite_id(two, 15, "aaaa", "yyyy"));  // no longer there
  CHECK(!overwrite_id(two, 4, "bbbb", "toolong"));
  CHECK(server_side_field(rpc::execute_plan) == 15);
  CHECK(observed_field(rpc::config) == 8);
}

TEST_CASE("A sweep drops the journals of sessions no longer bound, but not one being replayed", "[session_journal]") {
  journal_store store({}, nullptr);
  const std::string set = sql("SET a=1");
  for (const char* k : {"kept", "gone", "replaying"})
    store.record(k, classify_request(rpc::execute_plan, seg(set)), rpc::execute_plan, journal_form(seg(set)));
  REQUIRE(store.sessions() == 3);
  REQUIRE(store.begin_replay("replaying", [] {}));
  CHECK(store.sweep([](const std::string& k) { return k == "kept"; }) == 1);
  CHECK(store.sessions() == 2);
  CHECK(!store.snapshot("kept").entries.empty());
  CHECK(store.snapshot("gone").entries.empty());
  store.end_replay("replaying");
  CHECK(store.sweep([](const std::string& k) { return k == "kept"; }) == 1);
  CHECK(store.sessions() == 1);
}

TEST_CASE("A command whose stream broke is recorded once a reattach of its operation ends OK", "[session_journal]") {
  journal_store store({}, nullptr);
  const std::string set = sql("SET a=1");
  const auto v = classify_request(rpc::execute_plan, seg(set));
  store.defer("op-1", "k", v, rpc::execute_plan, journal_form(seg(set)));
  CHECK(store.snapshot("k").entries.empty());
  store.complete("op-1", "other-session");  // another session's reattach of that id: nothing
  CHECK(store.snapshot("k").entries.empty());
  store.complete("op-1", "k");
  CHECK(store.snapshot("k").entries.size() == 1);
  store.complete("op-1", "k");  // once
  CHECK(store.snapshot("k").entries.size() == 1);
  // A release drops what waits; the oldest waiting go past the bound.
  store.defer("op-2", "k", v, rpc::execute_plan, journal_form(seg(set)));
  store.forget("k");
  store.complete("op-2", "k");
  CHECK(store.snapshot("k").entries.empty());
  for (std::size_t i = 0; i <= journal_store::max_deferred; ++i)
    store.defer("op-" + std::to_string(i + 10), "k2", v, rpc::execute_plan, journal_form(seg(set)));
  store.complete("op-10", "k2");  // the oldest: gone
  CHECK(store.snapshot("k2").entries.empty());
  store.complete("op-11", "k2");
  CHECK(store.snapshot("k2").entries.size() == 1);
}
