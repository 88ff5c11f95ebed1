// cluster/membership.hpp: who is a member, what is dialed, with what backoff.
#include <catch2/catch.hpp>

#include <algorithm>

#include "cluster/membership.hpp"

namespace {

/// A stand-in for a cluster actor's handle: an id (0: none) on a node.
struct link {
  int node_id = 0;
  int id = 0;
  explicit operator bool() const { return id != 0; }
  bool operator==(const link& o) const { return id == o.id; }
  int node() const { return node_id; }
};

using table = scg::cluster::membership<link, std::string>;
using hello = table::hello;
const std::vector<std::string> none;

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

TEST_CASE("a peer's hello makes it a member, its gossip is dialed, a second hello only refreshes it",
          "[cluster][membership]") {
  table t("a");
  CHECK(t.on_hello({2, 20}, "router-b", false, "b", "10.0.0.2:7400", {"10.0.0.3:7400", "junk"}, 1000) == hello::joined);
  REQUIRE(t.members().count("b") == 1);
  const auto& b = t.members().at("b");
  CHECK(b.up);
  CHECK(b.router == "router-b");
  CHECK(b.address == "10.0.0.2:7400");
  CHECK(b.last_seen_ms == 1000);
  // The member's own address is connected; the gossiped one is due, the junk one never dialed.
  const auto due = t.dial_now(1000);
  CHECK(due == std::vector<std::string>{"10.0.0.3:7400"});
  CHECK(t.on_hello({2, 20}, "router-b", false, "b", "10.0.0.2:7400", none, 2000) == hello::known);
  CHECK(t.members().at("b").last_seen_ms == 2000);
  CHECK(t.known_addresses() == std::vector<std::string>{"10.0.0.2:7400"});
}

TEST_CASE("our own hello marks the address as ours, another process using our name is warned of once",
          "[cluster][membership]") {
  table t("a");
  t.add_target("10.0.0.1:7400");
  CHECK(t.on_hello({1, 10}, "r", true, "a", "10.0.0.1:7400", none, 0) == hello::ours);
  CHECK(t.dial_now(0).empty());  // never dialed again
  CHECK(t.on_hello({9, 90}, "r", false, "a", "10.0.0.9:7400", none, 0) == hello::twin);
  CHECK(t.on_hello({9, 90}, "r", false, "a", "10.0.0.9:7400", none, 0) == hello::twin_again);
  CHECK(t.members().empty());
  CHECK(t.on_hello({2, 20}, "r", false, "b", "no port", none, 0) == hello::bad_address);
  CHECK(t.members().count("b") == 0);
}

TEST_CASE("a second process claiming a live member's name is refused, a member's new link on its node replaces it",
          "[cluster][membership]") {
  table t("a");
  REQUIRE(t.on_hello({2, 20}, "r1", false, "b", "10.0.0.2:7400", none, 0) == hello::joined);
  bool warn = false;
  CHECK(t.on_hello({3, 30}, "r3", false, "b", "10.0.0.3:7400", none, 0, nullptr, &warn) == hello::claimed);
  CHECK(warn);
  CHECK(t.on_hello({3, 30}, "r3", false, "b", "10.0.0.3:7400", none, 0, nullptr, &warn) == hello::claimed);
  CHECK_FALSE(warn);  // warned once
  CHECK(t.members().at("b").address == "10.0.0.2:7400");  // the first one stays
  // The same node with a new actor (it restarted its cluster actor): the new link wins.
  link replaced;
  CHECK(t.on_hello({2, 21}, "r2", false, "b", "10.0.0.2:7400", none, 0, &replaced) == hello::joined);
  CHECK(replaced.id == 20);
  CHECK(t.members().at("b").router == "r2");
  // Another node from the member's own address: the member itself on a link
  // made anew (no second live process can hold its address): it replaces the old one.
  CHECK(t.on_hello({4, 40}, "r4", false, "b", "10.0.0.2:7400", none, 0, &replaced, &warn) == hello::joined);
  CHECK(replaced.node_id == 2);
  CHECK(t.members().at("b").router == "r4");
  CHECK(t.members().at("b").up);
}

TEST_CASE("a member whose link goes down is down, dialed again, and joins again with its next hello",
          "[cluster][membership]") {
  table t("a");
  t.add_target("10.0.0.2:7400");
  REQUIRE(t.dial_now(0) == std::vector<std::string>{"10.0.0.2:7400"});
  t.dial_succeeded("10.0.0.2:7400");
  REQUIRE(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 0) == hello::joined);
  CHECK(t.dial_now(0).empty());  // connected
  CHECK(t.on_down(link{7, 70}, 2000).empty());  // not a member's link
  CHECK(t.on_down(link{2, 20}, 2000) == std::vector<std::string>{"b"});
  CHECK_FALSE(t.members().at("b").up);
  CHECK(t.on_down(link{2, 20}, 2000).empty());  // already down
  CHECK(t.dial_now(0) == std::vector<std::string>{"10.0.0.2:7400"});
  CHECK(t.on_hello({2, 22}, "r", false, "b", "10.0.0.2:7400", none, 5) == hello::joined);
  CHECK(t.members().at("b").up);
}

TEST_CASE("failed dials back off, doubling to 2 s, and a connection starts the backoff over", "[cluster][membership]") {
  table t("a");
  const std::string x = "10.0.0.5:7400";
  t.add_target(x);
  std::int64_t now = 0;
  std::vector<std::int64_t> waits;
  REQUIRE(t.dial_now(now) == std::vector<std::string>{x});
  for (int i = 0; i < 6; ++i) {
    CHECK(t.dial_now(now).empty());  // in flight: not twice
    t.dial_failed(x, now);
    std::int64_t wait = 0;
    while (t.dial_now(now + wait).empty() && wait < 10000) wait += 50;  // due again after: the backoff
    waits.push_back(wait);
    now += wait;
  }
  CHECK(waits == std::vector<std::int64_t>{250, 500, 1000, 1000, 1000, 1000});
  // The last of those dials (in flight) connects: the backoff starts over.
  t.dial_succeeded(x);
  REQUIRE(t.dial_now(now) == std::vector<std::string>{x});  // no hello came back through it yet: due
  t.dial_failed(x, now);
  CHECK(t.dial_now(now + 249).empty());
  CHECK(t.dial_now(now + 250) == std::vector<std::string>{x});
}

TEST_CASE("members down for forget_after are forgotten with their addresses, up ones and 0 never",
          "[cluster][membership]") {
  table t("a");
  REQUIRE(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 1000) == hello::joined);
  REQUIRE(t.on_hello({3, 30}, "r", false, "c", "10.0.0.3:7400", none, 1000) == hello::joined);
  REQUIRE(t.on_down(link{2, 20}, 2000).size() == 1);
  CHECK(t.forget_departed(1000 + 600000, 0).empty());           // 0: never
  CHECK(t.forget_departed(1000 + 599999, 600000).empty());      // not long enough
  const auto gone = t.forget_departed(1000 + 600000, 600000);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].first == "b");
  CHECK(gone[0].second.address == "10.0.0.2:7400");
  CHECK(t.members().count("b") == 0);
  CHECK(t.members().count("c") == 1);  // up: stays however long
  CHECK_FALSE(has(t.dial_now(1000 + 600000), "10.0.0.2:7400"));
}

TEST_CASE("batches refresh the sender's last seen and lag, and the view lists this replica first",
          "[cluster][membership]") {
  table t("a");
  REQUIRE(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 1000) == hello::joined);
  t.on_batch(link{2, 20}, 3000, true, 42);
  t.on_batch(link{2, 20}, 4000, false, 99);  // no entries: lag kept
  const auto v = t.view("10.0.0.1:7400", 5000, false);
  REQUIRE(v.size() == 2);
  CHECK(v[0].name == "a");
  CHECK(v[0].status == "self");
  CHECK_FALSE(v[0].owner);  // not synced yet
  CHECK(v[1].name == "b");
  CHECK(v[1].status == "up");
  CHECK(v[1].last_seen_ms == 4000);
  CHECK(v[1].lag_ms == 42);
  CHECK(v[1].owner);  // a legacy peer never says it synced: it owns keys once up
  // A peer that announces its sync owns keys only once it said so, and only while up.
  REQUIRE(t.on_hello({3, 30}, "r", false, "c", "10.0.0.3:7400", none, scg::cluster::this_build(), 5000) ==
          hello::joined);
  CHECK_FALSE(t.view("10.0.0.1:7400", 5000, true)[2].owner);
  CHECK(t.on_synced(link{3, 30}));
  CHECK(t.view("10.0.0.1:7400", 5000, true)[0].owner);
  CHECK(t.view("10.0.0.1:7400", 5000, true)[2].owner);
  REQUIRE(t.on_down(link{3, 30}, 6000).size() == 1);
  CHECK_FALSE(t.view("10.0.0.1:7400", 6000, true)[2].owner);
}

TEST_CASE("a versioned hello records the peer's protocol, the legacy hello after it changes nothing",
          "[cluster][membership][version]") {
  table t("a", {2, 1, "0.2.0"});
  const scg::cluster::peer_version v2{2, 1, "0.2.0"};
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, v2, 1000) == hello::joined);
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 1000) == hello::known);  // its legacy echo
  CHECK(t.members().at("b").version == v2);
  // A peer that sent only the legacy hello is protocol 1, its version unknown.
  CHECK(t.on_hello({3, 30}, "r", false, "c", "10.0.0.3:7400", none, 1000) == hello::joined);
  CHECK(t.members().at("c").version == scg::cluster::legacy_peer());
  const auto v = t.view("10.0.0.1:7400", 2000, true);
  REQUIRE(v.size() == 3);
  CHECK(v[0].protocol == 2);
  CHECK(v[0].scg_version == "0.2.0");
  CHECK(v[1].protocol == 2);
  CHECK(v[1].scg_version == "0.2.0");
  CHECK(v[2].protocol == 1);
  CHECK(v[2].scg_version.empty());
  // c restarts on the new version (a new link on its node): the versioned hello wins.
  REQUIRE(t.on_down(link{3, 30}, 2000).size() == 1);
  CHECK(t.on_hello({3, 31}, "r", false, "c", "10.0.0.3:7400", none, v2, 3000) == hello::joined);
  CHECK(t.members().at("c").version == v2);
  // What each pair speaks: the newest protocol both do; nothing for a link no member has.
  CHECK(t.protocol_with(link{2, 20}) == 2);
  CHECK(t.protocol_with(link{3, 31}) == 2);
  CHECK(t.protocol_with(link{3, 30}) == 0);
  table older("o", {1, 1, "0.1.0"});
  CHECK(older.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, v2, 1000) == hello::joined);
  CHECK(older.protocol_with(link{2, 20}) == 1);
}

TEST_CASE("a peer with no protocol in common is refused with its legacy hello, warned of once per version",
          "[cluster][membership][version]") {
  table t("a", {2, 1, "0.2.0"});
  bool warn = false;
  const scg::cluster::peer_version nine{9, 9, "9.0.0"};
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, nine, 0, nullptr, &warn) == hello::refused);
  CHECK(warn);
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 0, nullptr, &warn) == hello::refused);
  CHECK_FALSE(warn);  // its legacy hello: refused with it, no second warning
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, nine, 0, nullptr, &warn) == hello::refused);
  CHECK_FALSE(warn);
  CHECK(t.members().empty());
  CHECK(t.dial_now(0).empty());  // nothing it gossips is dialed
  // A seed that turns out to be refused is dialed again only after a while.
  t.add_target("10.0.0.2:7400");
  REQUIRE(t.dial_now(100).size() == 1);
  t.dial_dropped("10.0.0.2:7400");
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, nine, 100, nullptr, &warn) == hello::refused);
  CHECK(t.dial_now(600).empty());
  CHECK(t.dial_now(100 + table::refused_redial_ms).size() == 1);
  t.dial_dropped("10.0.0.2:7400");
  // Upgraded to a version that is one release away: it joins.
  CHECK(t.on_hello({2, 21}, "r", false, "b", "10.0.0.2:7400", none, scg::cluster::peer_version{3, 2, "0.3.0"}, 0) == hello::joined);
  CHECK(t.members().at("b").version.protocol == 3);
  // A replica that no longer speaks protocol 1 refuses a v0.1.0 peer's legacy hello.
  table newer("n", {3, 2, "0.3.0"});
  CHECK(newer.on_hello({4, 40}, "r", false, "old", "10.0.0.4:7400", none, 0, nullptr, &warn) == hello::refused);
  CHECK(warn);
  CHECK(newer.members().empty());
}

TEST_CASE("a protocol-2 member owns keys once it says it synced, again after each time it comes up, "
          "a protocol-1 member at once",
          "[cluster][membership][version]") {
  table t("a", {2, 1, "0.2.0"});
  const scg::cluster::peer_version v2{2, 1, "0.2.0"};
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, v2, 1000) == hello::joined);
  CHECK_FALSE(t.members().at("b").synced);
  CHECK_FALSE(t.on_synced(link{9, 90}));  // no member on that link
  CHECK(t.on_synced(link{2, 20}));
  CHECK(t.members().at("b").synced);
  CHECK_FALSE(t.on_synced(link{2, 20}));  // no news
  REQUIRE(t.on_down(link{2, 20}, 2000).size() == 1);
  CHECK_FALSE(t.on_synced(link{2, 20}));  // down: nothing to mark
  CHECK(t.on_hello({2, 21}, "r", false, "b", "10.0.0.2:7400", none, v2, 2000) == hello::joined);
  CHECK_FALSE(t.members().at("b").synced);  // it syncs again before it owns keys
  CHECK(t.on_hello({3, 30}, "r", false, "c", "10.0.0.3:7400", none, 1000) == hello::joined);  // legacy: protocol 1
  CHECK(t.members().at("c").synced);
}

TEST_CASE("an up member's hello again is answered at most once a second, so a peer that saw us down learns we are up",
          "[cluster][membership]") {
  table t("a");
  CHECK_FALSE(t.greet_back("b", 5000));  // no such member
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 5000) == hello::joined);
  // b thawed, saw a stale down of our link and dialed us again: its hello is
  // `known` here, and only our greeting back brings us up on b.
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 5100) == hello::known);
  CHECK(t.greet_back("b", 5100));
  // b's answer to that greeting is `known` too: not answered again, the exchange ends.
  CHECK_FALSE(t.greet_back("b", 5200));
  CHECK_FALSE(t.greet_back("b", 5100 + table::greet_back_ms - 1));
  CHECK(t.greet_back("b", 5100 + table::greet_back_ms));
}

TEST_CASE("a member counted down that replicates to us is greeted, at most once a second, so a one-way split mends",
          "[cluster][membership]") {
  table t("a");
  CHECK(t.greet_stray(link{2, 20}, 5000).empty());  // no member on that link
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 5000) == hello::joined);
  CHECK(t.greet_stray(link{2, 20}, 5100).empty());  // up here: nothing to mend
  // A stale down of b's link: b never saw a break and keeps sending digests.
  REQUIRE(t.on_down(link{2, 20}, 6000).size() == 1);
  CHECK(t.greet_stray(link{2, 20}, 6000) == "b");
  CHECK(t.greet_stray(link{2, 20}, 6000 + table::greet_back_ms - 1).empty());
  CHECK(t.greet_stray(link{3, 30}, 7000).empty());  // another link: not b
  CHECK(t.greet_stray(link{2, 20}, 6000 + table::greet_back_ms) == "b");
  // b answers the greeting (it was `known` there, greet_back): b is up again.
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 7100) == hello::joined);
  CHECK(t.greet_stray(link{2, 20}, 9000).empty());
}

TEST_CASE("a synced member up is one whose sync to this replica may be under way, an unsynced or down one is not",
          "[cluster][membership]") {
  table t("a");
  CHECK_FALSE(t.synced_member_up());
  // Protocol 3 announces its sync: up but not synced until it says so.
  const scg::cluster::peer_version v3{3, 1, "0.2.0"};
  CHECK(t.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, v3, 1000) == hello::joined);
  CHECK_FALSE(t.synced_member_up());
  CHECK(t.on_synced(link{2, 20}));
  CHECK(t.synced_member_up());
  CHECK(t.on_down(link{2, 20}, 2000) == std::vector<std::string>{"b"});
  CHECK_FALSE(t.synced_member_up());
}

TEST_CASE("a member seen down is dialed again by the replica whose name sorts first, the other waits, then dials too",
          "[cluster][membership]") {
  // Both sides dialing at once after a thaw gives CAF two connections
  // between the same nodes (and, seen in the nemesis, a one-way split).
  table first("a"), second("b");
  REQUIRE(first.on_hello({2, 20}, "r", false, "b", "10.0.0.2:7400", none, 1000) == hello::joined);
  REQUIRE(second.on_hello({1, 10}, "r", false, "a", "10.0.0.1:7400", none, 1000) == hello::joined);
  REQUIRE(first.on_down(link{2, 20}, 2000).size() == 1);
  REQUIRE(second.on_down(link{1, 10}, 2000).size() == 1);
  CHECK(first.dial_now(2500) == std::vector<std::string>{"10.0.0.2:7400"});  // "a" dials at once
  CHECK(second.dial_now(2500).empty());                                       // "b" waits for its greeting
  CHECK(second.dial_now(1000 + table::redial_fallback_ms - 1).empty());
  // No greeting within the fallback: "b" dials as well.
  CHECK(second.dial_now(1000 + table::redial_fallback_ms) == std::vector<std::string>{"10.0.0.1:7400"});
  // Its greeting brings "a" up on "b" with no dial of "b"'s own.
  table other("b");
  REQUIRE(other.on_hello({1, 10}, "r", false, "a", "10.0.0.1:7400", none, 1000) == hello::joined);
  REQUIRE(other.on_down(link{1, 10}, 2000).size() == 1);
  CHECK(other.dial_now(2000).empty());
  CHECK(other.on_hello({1, 11}, "r", false, "a", "10.0.0.1:7400", none, 2100) == hello::joined);
  CHECK(other.dial_now(2200).empty());  // connected
  // A seed that is no member yet is dialed whatever its name.
  table fresh("z");
  fresh.add_target("10.0.0.1:7400");
  CHECK(fresh.dial_now(0) == std::vector<std::string>{"10.0.0.1:7400"});
}

TEST_CASE("a member whose link drops right after its greeting is dialed at once by the replica that would wait",
          "[cluster][membership]") {
  // "a" dialed and greeted "b"; the link dropped within a millisecond
  // (seen in the nemesis after a heal). "a"'s next dials get CAF's cached,
  // dead link until its connection timeout: "b" dials instead of waiting.
  table second("b");
  REQUIRE(second.on_hello({1, 10}, "r", false, "a", "10.0.0.1:7400", none, 1000) == hello::joined);
  REQUIRE(second.on_down(link{1, 10}, 1000 + table::flap_ms - 1).size() == 1);
  CHECK(second.members().at("a").flapped);
  CHECK(second.dial_now(1000 + table::flap_ms) == std::vector<std::string>{"10.0.0.1:7400"});
  second.dial_succeeded("10.0.0.1:7400");
  // Up again, then down after a while: it waits for "a" as before.
  REQUIRE(second.on_hello({1, 11}, "r", false, "a", "10.0.0.1:7400", none, 3000) == hello::joined);
  CHECK_FALSE(second.members().at("a").flapped);
  REQUIRE(second.on_down(link{1, 11}, 3000 + table::flap_ms).size() == 1);
  CHECK_FALSE(second.members().at("a").flapped);
  CHECK(second.dial_now(3000 + table::flap_ms + 1).empty());
}

TEST_CASE("a member held for the other side's dial is dialed from this side once its port is open without a greeting",
          "[cluster][membership]") {
  // "a" dialed "b" after a heal, but CAF answered from a connection that
  // is dead on "a"'s side: no greeting reaches "b" until that connection
  // times out (~1.25 s). "b" probes "a" meanwhile and dials it itself.
  table second("b");
  REQUIRE(second.on_hello({1, 10}, "r", false, "a", "10.0.0.1:7400", none, 1000) == hello::joined);
  REQUIRE(second.on_down(link{1, 10}, 3000).size() == 1);
  const std::string a = "10.0.0.1:7400";
  CHECK(second.held_addresses(3100).count(a));
  CHECK(second.dial_now(3100).empty());
  second.held_port_open(a, 3200);
  second.held_port_open(a, 3300);  // the first time counts
  CHECK(second.dial_now(3200 + table::held_open_ms - 1).empty());
  CHECK_FALSE(second.held_addresses(3200 + table::held_open_ms).count(a));
  CHECK(second.dial_now(3200 + table::held_open_ms) == std::vector<std::string>{a});
  second.dial_dropped(a);
  // A shut port starts the count over.
  second.held_port_shut(a);
  CHECK(second.dial_now(3200 + table::held_open_ms).empty());
  // Its greeting (brought by either dial) ends the hold; the next down starts afresh.
  second.held_port_open(a, 4000);
  REQUIRE(second.on_hello({1, 11}, "r", false, "a", a, none, 4100) == hello::joined);
  REQUIRE(second.on_down(link{1, 11}, 6000).size() == 1);
  CHECK(second.dial_now(6000 + table::held_open_ms).empty());
  CHECK(second.held_addresses(6000 + table::held_open_ms).count(a));
}
