#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster/hlc.hpp"
#include "cluster/replicated_table.hpp"
#include "core/rendezvous.hpp"

using namespace scg::cluster;

namespace {

version ver(std::uint64_t wall, std::string node, std::uint32_t logical = 0) {
  return version{{wall, logical}, std::move(node)};
}

entry live(std::string key, std::string backend, version v) {
  return entry{std::move(key), std::move(backend), {}, std::move(v), false, 0};
}

entry tombstone(std::string key, version v, std::uint64_t expires) {
  return entry{std::move(key), {}, {}, std::move(v), true, expires};
}

// One line per entry, sorted by key: equal dumps mean identical tables.
std::string dump(const replicated_table& t) {
  auto entries = t.all();
  std::sort(entries.begin(), entries.end(),
            [](const entry& a, const entry& b) { return a.key < b.key; });
  std::ostringstream out;
  for (const auto& e : entries)
    out << e.key << " backend=" << e.backend << " session=" << e.session
        << " ver=" << e.ver.time.wall_ms << '.' << e.ver.time.logical << '@' << e.ver.node
        << " deleted=" << e.deleted << " expires=" << e.tombstone_expires_ms << '\n';
  return out.str();
}

// A key whose digest bucket differs from `other`'s.
std::string key_outside_bucket_of(const std::string& other) {
  for (int i = 0;; ++i) {
    std::string k = "s/k" + std::to_string(i);
    if (replicated_table::bucket_of(k) != replicated_table::bucket_of(other)) return k;
  }
}

constexpr std::uint64_t forever = std::numeric_limits<std::uint64_t>::max();

// Sessions s/0 .. s/(n-1) merged into both tables, with the same versions.
void same_sessions(replicated_table& a, replicated_table& b, int n) {
  for (int i = 0; i < n; ++i) {
    entry e = live("s/" + std::to_string(i), "b" + std::to_string(i % 3), ver(i + 1, "n"));
    a.merge(e);
    b.merge(e);
  }
}

}  // namespace

TEST_CASE("a newer version replaces an entry and an equal or older one does not", "[table]") {
  replicated_table t;
  auto r = t.merge(live("s/a", "b1", ver(100, "n1")));
  CHECK(r.applied);
  CHECK_FALSE(r.previous);
  CHECK(t.size() == 1);
  CHECK(t.live_count() == 1);

  r = t.merge(live("s/a", "b1", ver(200, "n1")));
  CHECK(r.applied);
  REQUIRE(r.previous);
  CHECK(r.previous->ver == ver(100, "n1"));
  CHECK(t.find("s/a")->ver == ver(200, "n1"));

  CHECK_FALSE(t.merge(live("s/a", "b1", ver(150, "n9"))).applied);
  CHECK_FALSE(t.merge(live("s/a", "b1", ver(200, "n1"))).applied);
  CHECK(t.find("s/a")->ver == ver(200, "n1"));
  CHECK(t.size() == 1);
  CHECK_FALSE(t.find("s/none"));
}

TEST_CASE("merging the same entry again changes nothing", "[table]") {
  replicated_table t;
  entry e = live("o/op1", "b2", ver(100, "n1"));
  e.session = "s/x";
  t.merge(e);
  const auto d = t.digest();
  const auto before = dump(t);
  auto r = t.merge(e);
  CHECK_FALSE(r.applied);
  CHECK_FALSE(r.conflict);
  CHECK_FALSE(r.previous);
  CHECK(t.digest() == d);
  CHECK(dump(t) == before);
  CHECK(t.find("o/op1")->session == "s/x");
}

TEST_CASE("a version tie on time is broken by node name", "[table]") {
  replicated_table x, y;
  entry from_a = live("s/k", "b1", ver(100, "a"));
  entry from_b = live("s/k", "b2", ver(100, "b"));
  x.merge(from_a);
  x.merge(from_b);
  y.merge(from_b);
  y.merge(from_a);
  CHECK(x.find("s/k")->backend == "b2");
  CHECK(dump(x) == dump(y));
}

TEST_CASE("concurrent bindings to different backends count one conflict on every replica "
          "that sees both",
          "[table]") {
  entry older = live("s/k", "b1", ver(100, "a"));
  entry newer = live("s/k", "b2", ver(100, "b"));

  // The writers each hold their own write and receive the other's.
  replicated_table a, b;
  a.put(older.key, older.backend, {}, older.ver);
  b.put(newer.key, newer.backend, {}, newer.ver);
  auto at_a = a.merge(newer);  // replaces the local live entry
  auto at_b = b.merge(older);  // loses against the local live entry
  CHECK(at_a.applied);
  CHECK(at_a.conflict);
  CHECK_FALSE(at_b.applied);
  CHECK(at_b.conflict);

  // A third replica counts one conflict in either order.
  for (bool older_first : {true, false}) {
    replicated_table c;
    int conflicts = 0;
    for (const auto& e : older_first ? std::vector<entry>{older, newer}
                                     : std::vector<entry>{newer, older})
      conflicts += c.merge(e).conflict ? 1 : 0;
    CHECK(conflicts == 1);
    CHECK(c.find("s/k")->backend == "b2");
    CHECK(dump(c) == dump(a));
  }
  CHECK(dump(a) == dump(b));
}

TEST_CASE("bindings that agree on the backend, and tombstones, are not conflicts", "[table]") {
  replicated_table t;
  t.merge(live("s/k", "b1", ver(100, "a")));
  CHECK_FALSE(t.merge(live("s/k", "b1", ver(100, "b"))).conflict);  // same backend, newer
  CHECK_FALSE(t.merge(live("s/k", "b1", ver(50, "c"))).conflict);   // same backend, older
  CHECK_FALSE(t.merge(tombstone("s/k", ver(200, "a"), forever)).conflict);
  CHECK_FALSE(t.merge(live("s/k", "b9", ver(150, "c"))).conflict);  // loses to a tombstone
  CHECK_FALSE(t.merge(live("s/k", "b9", ver(300, "c"))).conflict);  // replaces a tombstone
}

TEST_CASE("a tombstone beats an older binding and expires after its ttl", "[table]") {
  replicated_table t;
  t.put("s/k", "b1", {}, ver(100, "a"));
  const entry& gone = t.erase("s/k", ver(200, "a"), 1000, 5000);
  CHECK(gone.deleted);
  CHECK(gone.backend.empty());
  CHECK(gone.tombstone_expires_ms == 6000);
  CHECK(t.size() == 1);
  CHECK(t.live_count() == 0);

  // A late delivery of an older binding does not bring the session back.
  auto r = t.merge(live("s/k", "b2", ver(150, "b")));
  CHECK_FALSE(r.applied);
  CHECK(t.find("s/k")->deleted);

  CHECK(t.expire_tombstones(5999) == 0);
  CHECK(t.expire_tombstones(6000) == 1);
  CHECK_FALSE(t.find("s/k"));
  CHECK(t.size() == 0);
  CHECK(t.digest() == bucket_digest{});
}

TEST_CASE("a tombstone found by a pass in steps is dropped once expired, a live entry never", "[table]") {
  replicated_table t;
  t.erase("s/k", ver(200, "a"), 1000, 5000);  // expires at 6000
  t.merge(live("s/live", "b1", ver(300, "a")));
  const auto with_live = t.digest();
  CHECK_FALSE(t.expire_tombstone("s/k", 5999));
  CHECK_FALSE(t.expire_tombstone("s/live", 1u << 30));
  CHECK_FALSE(t.expire_tombstone("s/absent", 1u << 30));
  CHECK(t.expire_tombstone("s/k", 6000));
  CHECK_FALSE(t.find("s/k"));
  CHECK(t.size() == 1);
  CHECK(t.live_count() == 1);
  CHECK(t.digest() != with_live);  // the tombstone's share of its bucket is gone
  replicated_table only_live;
  only_live.merge(live("s/live", "b1", ver(300, "a")));
  CHECK(t.digest() == only_live.digest());
}

TEST_CASE("a binding newer than a tombstone brings the key back", "[table]") {
  replicated_table t;
  t.erase("s/k", ver(200, "a"), 1000, 0);  // a delete of a key never seen
  CHECK(t.find("s/k")->deleted);
  auto r = t.merge(live("s/k", "b3", ver(300, "b")));
  CHECK(r.applied);
  REQUIRE(r.previous);
  CHECK(r.previous->deleted);
  CHECK(t.live_count() == 1);
  CHECK(t.expire_tombstones(forever) == 0);
  CHECK(t.find("s/k")->backend == "b3");
}

TEST_CASE("a local write older than the entry in force does not apply", "[table]") {
  replicated_table t;
  t.merge(live("s/k", "b1", ver(500, "b")));
  const entry& in_force = t.put("s/k", "b2", {}, ver(400, "a"));
  CHECK(in_force.backend == "b1");
  CHECK(in_force.ver == ver(500, "b"));
  const entry& still = t.erase("s/k", ver(450, "a"), 10, 0);
  CHECK_FALSE(still.deleted);
}

TEST_CASE("the digest changes on every change and returns when the same state is reached "
          "in another order",
          "[table]") {
  replicated_table t;
  const auto empty = t.digest();
  CHECK(empty == bucket_digest{});

  t.put("s/a", "b1", {}, ver(1, "n"));
  const auto d1 = t.digest();
  CHECK(d1 != empty);
  t.put("s/b", "b1", {}, ver(2, "n"));
  const auto d2 = t.digest();
  CHECK(d2 != d1);
  t.put("s/a", "b1", {}, ver(3, "n"));  // same backend, newer version
  const auto d3 = t.digest();
  CHECK(d3 != d2);
  t.erase("s/a", ver(4, "n"), 10, 100);
  const auto d4 = t.digest();
  CHECK(d4 != d3);
  t.expire_tombstones(110);
  const auto d5 = t.digest();
  CHECK(d5 != d4);

  // The same final state, reached the other way round.
  replicated_table u;
  u.merge(live("s/b", "b1", ver(2, "n")));
  CHECK(u.digest() == d5);
  CHECK(dump(u) == dump(t));
}

TEST_CASE("differing buckets name exactly the bucket that changed", "[table]") {
  replicated_table a, b;
  same_sessions(a, b, 300);
  CHECK(differing_buckets(a.digest(), b.digest()).empty());

  b.put("s/17", "b2", {}, ver(1000, "m"));
  const auto diff = differing_buckets(a.digest(), b.digest());
  REQUIRE(diff.size() == 1);
  CHECK(diff[0] == replicated_table::bucket_of("s/17"));

  // Repair by anti-entropy: ship only the differing buckets.
  for (auto bucket : diff) {
    for (const auto& e : b.bucket_entries(bucket)) a.merge(e);
    for (const auto& e : a.bucket_entries(bucket)) b.merge(e);
  }
  CHECK(a.digest() == b.digest());
  CHECK(dump(a) == dump(b));
}

TEST_CASE("bucket entries hold exactly the keys of their bucket", "[table]") {
  replicated_table t;
  t.put("s/x", "b1", {}, ver(1, "n"));
  const std::string other = key_outside_bucket_of("s/x");
  t.put(other, "b1", {}, ver(2, "n"));
  auto in_x = t.bucket_entries(replicated_table::bucket_of("s/x"));
  REQUIRE(in_x.size() == 1);
  CHECK(in_x[0].key == "s/x");
  CHECK(t.bucket_entries(digest_buckets).empty());
  CHECK(t.all().size() == 2);
}

TEST_CASE("the fine digest names the sub-buckets that changed and folds into the coarse one", "[table]") {
  replicated_table a, b;
  same_sessions(a, b, 5000);
  CHECK(differing_parts(a.fine(), b.fine()).empty());
  // Each bucket's hash is the XOR of its sub-buckets'.
  for (std::size_t bucket = 0; bucket < digest_buckets; ++bucket) {
    std::uint64_t folded = 0;
    for (std::size_t sub = 0; sub < sub_buckets; ++sub) folded ^= a.fine()[bucket * sub_buckets + sub];
    CHECK(folded == a.digest()[bucket]);
  }

  b.put("s/17", "b2", {}, ver(9000, "m"));
  b.erase("s/4242", ver(9001, "m"), 1000, 1);
  const auto f17 = replicated_table::fine_bucket_of("s/17");
  const auto f4242 = replicated_table::fine_bucket_of("s/4242");
  CHECK(f17 / sub_buckets == replicated_table::bucket_of("s/17"));
  const auto parts = differing_parts(a.fine(), b.fine());
  std::size_t keys_in_parts = 0;
  std::uint64_t subs_named = 0;
  for (const auto& p : parts) {
    for (std::size_t sub = 0; sub < sub_buckets; ++sub)
      if ((p.subs >> sub) & 1) {
        const auto f = p.bucket * sub_buckets + sub;
        CHECK((f == f17 || f == f4242));
        ++subs_named;
      }
    keys_in_parts += b.bucket_entries(p.bucket, p.subs).size();
  }
  CHECK(subs_named == (f17 == f4242 ? 1u : 2u));
  // A repair of those parts sends a few keys, not the 78 of a whole bucket.
  CHECK(keys_in_parts >= 2);
  CHECK(keys_in_parts < 10);
  CHECK(b.bucket_entries(f17 / sub_buckets).size() > 40);

  for (const auto& p : parts)
    for (const auto& e : b.bucket_entries(p.bucket, p.subs)) a.merge(e);
  CHECK(a.fine() == b.fine());
  CHECK(a.digest() == b.digest());
  CHECK(dump(a) == dump(b));
  CHECK(b.bucket_entries(0, 0).empty());
}

TEST_CASE("replicas converge whatever the order of delivery", "[table]") {
  constexpr int replicas = 3;
  const std::array<std::string, replicas> names{"r0", "r1", "r2"};
  const std::array<std::string, 5> keys{"s/a", "s/b", "s/c", "o/1", "o/2"};
  std::mt19937_64 rng{20240601};
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };

  for (int trial = 0; trial < 200; ++trial) {
    std::array<std::uint64_t, replicas> walls{1000, 1000, 1000};
    std::vector<hlc> clocks;
    for (int r = 0; r < replicas; ++r) clocks.emplace_back([&walls, r] { return walls[r]; });
    std::array<replicated_table, replicas> tables;
    std::vector<entry> sent;  // every local write, as it would go on the wire

    // Concurrent local writes with skewed, stalling and backward wall clocks,
    // interleaved with partial deliveries between replicas.
    for (int step = 0; step < 40; ++step) {
      const std::size_t r = pick(replicas);
      walls[r] = walls[r] + pick(4) - (pick(5) == 0 ? 3 : 0);
      const std::string& key = keys[pick(keys.size())];
      switch (pick(3)) {
        case 0: {
          version v{clocks[r].now(), names[r]};
          std::string session = key[0] == 'o' ? "s/a" : "";
          sent.push_back(tables[r].put(key, "b" + std::to_string(pick(3)), session, v));
          break;
        }
        case 1: {
          version v{clocks[r].now(), names[r]};
          sent.push_back(tables[r].erase(key, v, forever, walls[r]));
          break;
        }
        default:
          if (sent.empty()) break;
          const entry& e = sent[pick(sent.size())];
          clocks[r].observe(e.ver.time);
          tables[r].merge(e);
      }
    }

    // The newest write of each key is what everyone must end up with.
    replicated_table expected;
    for (const auto& e : sent) {
      const auto cur = expected.find(e.key);
      if (!cur || cur->ver < e.ver) expected.merge(e);
    }

    // Deliver everything to each replica, and to a newcomer, in its own
    // random order with repeats.
    replicated_table newcomer;
    auto deliver_all = [&](replicated_table& t) {
      std::vector<entry> inbox = sent;
      for (int i = 0; i < 5 && !sent.empty(); ++i) inbox.push_back(sent[pick(sent.size())]);
      std::shuffle(inbox.begin(), inbox.end(), rng);
      for (const auto& e : inbox) t.merge(e);
    };
    for (auto& t : tables) deliver_all(t);
    deliver_all(newcomer);

    INFO("trial " << trial);
    const std::string want = dump(expected);
    for (const auto& t : tables) {
      REQUIRE(dump(t) == want);
      REQUIRE(t.digest() == expected.digest());
      REQUIRE(t.size() == expected.size());
      REQUIRE(t.live_count() == expected.live_count());
    }
    REQUIRE(dump(newcomer) == want);
    REQUIRE(newcomer.digest() == expected.digest());
  }
}

TEST_CASE("thousands of keys stay findable through growth and tombstone removal", "[table]") {
  // The table's own hashing: every key lands in a bucket's probe run, and
  // removing tombstones from the middle of runs must not hide later keys.
  replicated_table t;
  std::map<std::string, std::string> model;  // live key -> backend
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "s/" + std::to_string(rng() % 3000);
    if (rng() % 4 == 0) {
      t.erase(key, ver(10 + i, "n"), 5, 100);  // expires at 105
      model.erase(key);
    } else {
      const std::string backend = "b" + std::to_string(rng() % 5);
      t.put(key, backend, key.substr(2), ver(10 + i, "n"));
      model[key] = backend;
    }
  }
  CHECK(t.live_count() == model.size());
  t.expire_tombstones(105);
  CHECK(t.size() == model.size());
  for (const auto& [key, backend] : model) {
    const auto e = t.find(key);
    REQUIRE(e);
    CHECK(e->backend == backend);
    CHECK(e->session == key.substr(2));
  }
  std::size_t seen = 0;
  t.for_each([&](const entry_view& e) {
    ++seen;
    CHECK(model.at(std::string(e.key)) == e.backend);
  });
  CHECK(seen == model.size());
  // Rebuilt from its buckets, a second table has the same digest.
  replicated_table copy;
  for (std::size_t b = 0; b < digest_buckets; ++b)
    for (const auto& e : t.bucket_entries(b)) copy.merge(e);
  CHECK(copy.digest() == t.digest());
}

TEST_CASE("a binding lives a whole ttl past its last use anywhere", "[table]") {
  const std::int64_t ttl = 4000, written = 10000;
  // Used here recently enough to tell the others: written again.
  CHECK(binding_fate(written, written + 1001, written + 1500, ttl) == fate::touch);
  // Used elsewhere just before a touch was due (written + ttl/4): a replica
  // that never served it keeps it until ttl after that possible use.
  CHECK(binding_fate(written, 0, written + 1000 + ttl, ttl) == fate::keep);
  CHECK(binding_fate(written, 0, written + 1000 + ttl + 1, ttl) == fate::expire);
  // Used here long ago: the local use does not shorten the grace.
  CHECK(binding_fate(written, written + 500, written + ttl + 900, ttl) == fate::keep);
  CHECK(binding_fate(written, written + 500, written + ttl + 1001, ttl) == fate::expire);
}

TEST_CASE("a live operation keeps its start through writes, merges and touches", "[table]") {
  replicated_table t;
  auto in_force = t.put("o/op", "b1", "s/x", ver(100, "a"), 1234);
  CHECK(in_force.started_ms == 1234);
  CHECK(t.find("o/op")->started_ms == 1234);
  CHECK(t.find("o/op")->backend == "b1");
  CHECK(t.find("o/op")->session == "s/x");
  entry later = *t.find("o/op");
  later.ver = ver(200, "b");
  CHECK(t.merge(later).applied);
  CHECK(t.find("o/op")->started_ms == 1234);
  std::uint64_t seen = 0;
  t.for_each([&](const entry_view& e) { seen = e.started_ms; });
  CHECK(seen == 1234);
  // A session binding has none, and a tombstone has only its expiry.
  t.put("s/x", "b1", {}, ver(100, "a"));
  CHECK(t.find("s/x")->started_ms == 0);
  const auto gone = t.erase("o/op", ver(300, "a"), 1000, 5000);
  CHECK(gone.tombstone_expires_ms == 6000);
  CHECK(gone.started_ms == 0);
  CHECK(t.find("o/op")->tombstone_expires_ms == 6000);
}

TEST_CASE("a pass in steps visits every entry once, whatever the step size", "[replicated_table]") {
  replicated_table t;
  for (int i = 0; i < 5000; ++i) t.merge(live("s/k" + std::to_string(i), "b", ver(1000 + i, "n1")));
  t.merge(tombstone("s/gone", ver(9000, "n1"), 99999));
  for (std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
    std::map<std::string, int> seen;
    replicated_table::cursor at;
    int steps = 0;
    while (!at.done() && steps < 1'000'000) {
      at = t.for_each_step(at, step, [&](const entry_view& e) { ++seen[std::string(e.key)]; });
      ++steps;
    }
    INFO("step " << step << ", " << steps << " steps");
    REQUIRE(at.done());
    REQUIRE(seen.size() == 5001);
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second == 1; }));
    if (step == 4096) REQUIRE(steps > 1);  // a large table takes several steps
  }
}

TEST_CASE("a pass in steps over an empty table ends at once", "[replicated_table]") {
  replicated_table t;
  int visited = 0, steps = 0;
  replicated_table::cursor at;
  while (!at.done() && steps < 1000) {
    at = t.for_each_step(at, 16, [&](const entry_view&) { ++visited; });
    ++steps;
  }
  REQUIRE(at.done());
  REQUIRE(visited == 0);
  REQUIRE(steps <= 64 / 16 + 1);
}

TEST_CASE("live_backend reads the table from another thread while its owner writes", "[replicated_table]") {
  // The router's look-ups run beside the cluster actor's merges: every
  // answer is one the table held (none, or the key's backend), through
  // growth and tombstones; the sanitizer build checks the memory side.
  replicated_table t;
  constexpr int keys = 20000;
  std::atomic<bool> writing{true};
  std::atomic<int> wrong{0}, found{0};
  std::thread reader([&] {
    std::mt19937 rng(3);
    for (int n = 0; writing.load() && n < 5'000'000; ++n) {
      const int k = static_cast<int>(rng() % keys);
      const auto b = t.live_backend("s/" + std::to_string(k));
      if (b.empty()) continue;
      ++found;
      if (b != "b" + std::to_string(k % 7)) ++wrong;
    }
  });
  for (int i = 0; i < keys; ++i) t.merge(live("s/" + std::to_string(i), "b" + std::to_string(i % 7), ver(10 + i, "n")));
  for (int i = 0; i < keys; i += 2) t.erase("s/" + std::to_string(i), ver(100000 + i, "n"), 5, 100);
  t.expire_tombstones(105);
  writing = false;
  reader.join();
  CHECK(wrong == 0);
  CHECK(t.live_backend("s/1") == "b1");
  CHECK(t.live_backend("s/0").empty());  // erased, its tombstone dropped
  CHECK(t.live_backend("s/absent").empty());
  INFO("answers with a backend: " << found.load());
}

TEST_CASE("released tells a tombstone from a live entry and from no entry", "[replicated_table]") {
  // The owner refuses a clone announced after its release on this answer.
  replicated_table t;
  t.merge(live("s/kept", "b1", ver(10, "n")));
  t.merge(live("s/gone", "b2", ver(11, "n")));
  t.erase("s/gone", ver(20, "n"), 1000, 100);
  CHECK_FALSE(t.released("s/kept"));
  CHECK(t.released("s/gone"));
  CHECK(t.live_backend("s/gone").empty());
  CHECK_FALSE(t.released("s/absent"));
  // Bound again after the release (a newer write): no longer released.
  t.merge(live("s/gone", "b1", ver(30, "m")));
  CHECK_FALSE(t.released("s/gone"));
  // The tombstone expires: nothing is left to say it was released.
  t.erase("s/kept", ver(40, "n"), 5, 100);
  CHECK(t.released("s/kept"));
  t.expire_tombstones(105);
  CHECK_FALSE(t.released("s/kept"));
}

TEST_CASE("the fine digest is the XOR of each sub-bucket's entry hashes, as every version of scg computes them",
          "[replicated_table]") {
  // Peers of other versions compare digests with ours: an entry's hash is
  // the stable hash of its key, wall time, logical time, node and deleted
  // flag, in that order, whatever path (merge, put, erase, a new or a
  // replaced key, a tail of another size) wrote the entry.
  auto definition = [](const entry& e) {
    return scg::core::stable_hasher{}
        .add(e.key)
        .add(e.ver.time.wall_ms)
        .add(std::uint64_t{e.ver.time.logical})
        .add(e.ver.node)
        .add(std::uint64_t{e.deleted ? 1u : 0u})
        .finish();
  };
  const auto e = live("s/default/pat/0f1e", "fake-a", ver(1700000000123, "scg-0", 7));
  CHECK(replicated_table::entry_hash(e) == definition(e));
  CHECK(replicated_table::entry_hash(tombstone("o/x", ver(5, "n"), 9)) == definition(tombstone("o/x", ver(5, "n"), 9)));

  replicated_table t;
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    const auto key = (i % 4 ? "s/k" : "o/k") + std::to_string(rng() % 700);
    const auto v = ver(static_cast<std::uint64_t>(i + 1), "n" + std::to_string(rng() % 3), rng() % 2);
    switch (rng() % 4) {
      case 0: t.merge(live(key, "backend-" + std::to_string(rng() % 3), v)); break;
      case 1: t.merge(tombstone(key, v, 50 + rng() % 50)); break;
      case 2: t.put(key, "b" + std::string(rng() % 5, 'x'), (i % 2) ? "s/sess" : "", v, rng() % 2); break;
      default: t.erase(key, v, 100, static_cast<std::uint64_t>(i)); break;
    }
  }
  t.expire_tombstones(3000 + 80);
  fine_digest expected{};
  std::size_t live_count = 0;
  for (const auto& x : t.all()) {
    expected[replicated_table::fine_bucket_of(x.key)] ^= definition(x);
    live_count += !x.deleted;
  }
  CHECK(t.fine() == expected);
  CHECK(t.live_count() == live_count);
}

TEST_CASE("a pass skips the use look-up only where every use leaves the binding kept", "[table]") {
  std::mt19937_64 rng(5);
  int skipped = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t ttl = 1 + static_cast<std::int64_t>(rng() % 10000);
    const std::int64_t written = static_cast<std::int64_t>(rng() % 100000);
    const std::int64_t wall = written + static_cast<std::int64_t>(rng() % (2 * ttl)) - ttl / 8;
    if (!kept_whatever_use(written, wall, ttl)) continue;
    ++skipped;
    // No use at all, or any use up to now.
    CHECK(binding_fate(written, 0, wall, ttl) == fate::keep);
    for (std::int64_t used : {written, wall, wall - 1, written + ttl / 4, (written + wall) / 2})
      if (used > 0 && used <= wall) CHECK(binding_fate(written, used, wall, ttl) == fate::keep);
  }
  CHECK(skipped > 1000);
  CHECK_FALSE(kept_whatever_use(0, 1001, 4000));  // past a quarter ttl: looked up (a touch may be due)
}
