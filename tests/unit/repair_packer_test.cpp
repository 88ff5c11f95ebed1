// cluster/repair_packer.hpp: a repair's messages, packed a step at a time.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/repair_packer.hpp"

using namespace scg::cluster;

namespace {

version ver(std::uint64_t wall) { return version{{wall, 0}, "scg-0"}; }

/// Keys "s/k<i>" for i from `from` on, the first `n` of bucket `b` (all buckets when b is digest_buckets).
std::vector<std::string> keys_in(std::size_t b, std::size_t n, std::size_t from = 0) {
  std::vector<std::string> out;
  for (std::size_t i = from; out.size() < n && i < from + 1000 * n; ++i) {
    auto k = "s/k" + std::to_string(i);
    if (b == digest_buckets || replicated_table::bucket_of(k) == b) out.push_back(k);
  }
  REQUIRE(out.size() == n);
  return out;
}

std::vector<bucket_part> every_bucket() {
  std::vector<bucket_part> parts;
  for (std::size_t b = 0; b < digest_buckets; ++b) parts.push_back({b});
  return parts;
}

/// Steps and takes until done (at most `steps` steps), with `between` called
/// after each step; the keys each message carried, by message.
template <class F>
std::vector<std::vector<std::string>> drain(const replicated_table& t, repair_packer& p, int steps, F between) {
  std::vector<std::vector<std::string>> messages;
  for (int i = 0; i < steps && !p.done(); ++i) {
    p.step(t);
    if (p.ready()) {  // one message a step, as the cluster actor takes them
      auto m = p.take();
      std::vector<std::string> keys;
      packed_reader in(m.bytes);
      for (entry e; in.next(e);) keys.push_back(e.key);
      CHECK(in.error().empty());
      CHECK(keys.size() == m.count);
      messages.push_back(std::move(keys));
    }
    between();
  }
  CHECK(p.done());
  return messages;
}

std::map<std::string, int> counted(const std::vector<std::vector<std::string>>& messages) {
  std::map<std::string, int> n;
  for (const auto& m : messages)
    for (const auto& k : m) ++n[k];
  return n;
}

}  // namespace

TEST_CASE("repair_packer: a table that does not change is sent once, in messages of chunk entries") {
  replicated_table t;
  const auto keys = keys_in(digest_buckets, 20000);
  for (const auto& k : keys) t.put(k, "spark-a", {}, ver(1000));
  repair_packer p(every_bucket(), 1000);
  const auto messages = drain(t, p, 10000, [] {});
  const auto n = counted(messages);
  CHECK(n.size() == keys.size());
  for (const auto& k : keys) CHECK(n.count(k) == 1);  // each key, and (below) each once
  for (const auto& [k, times] : n) CHECK(times == 1);
  for (std::size_t i = 0; i + 1 < messages.size(); ++i) CHECK(messages[i].size() == 1000);
  CHECK(messages.size() == 20);
  CHECK(p.restarts() == 0);
}

TEST_CASE("repair_packer: a step looks at a bounded number of slots") {
  replicated_table t;
  // Bucket 3 holds 40,000 entries, of which the part asks for one sub-bucket:
  // a step ends after slots_per_step slots without a full message.
  for (const auto& k : keys_in(3, 40000)) t.put(k, "spark-a", {}, ver(1000));
  const std::uint64_t sub = std::uint64_t{1} << (replicated_table::fine_bucket_of(keys_in(3, 1)[0]) % sub_buckets);
  repair_packer p({{3, sub}}, 4096);
  REQUIRE(t.bucket_slots(3) >= 2 * repair_packer::slots_per_step);
  p.step(t);
  CHECK_FALSE(p.ready());
  int steps = 1;
  while (!p.ready() && steps < 100) p.step(t), ++steps;
  CHECK(steps == static_cast<int>((t.bucket_slots(3) + repair_packer::slots_per_step - 1) / repair_packer::slots_per_step));
  const auto m = p.take();
  CHECK(m.count > 0);
  CHECK(m.count < 4096);  // about 40,000 / 64
  CHECK(p.done());
}

TEST_CASE("repair_packer: a part whose bucket grew between steps starts over and misses nothing") {
  replicated_table t;
  const auto before = keys_in(5, 3000);
  for (const auto& k : before) t.put(k, "spark-a", {}, ver(1000));
  repair_packer p({{5}}, 200);
  bool grew = false;
  const auto messages = drain(t, p, 1000, [&] {
    if (grew) return;
    // After the first step, writes enough to the bucket to double its map:
    // entries then sit in other slots, some before where the packing was.
    const auto moves = t.bucket_moves(5);
    for (const auto& k : keys_in(5, 4000, 10'000'000)) t.put(k, "spark-b", {}, ver(2000));
    grew = t.bucket_moves(5) != moves;
  });
  REQUIRE(grew);
  const auto n = counted(messages);
  for (const auto& k : before) CHECK(n.count(k) == 1);  // each sent, some twice (before and after the growth)
  CHECK(p.restarts() == 1);
}

TEST_CASE("repair_packer: a part whose bucket moves at every step is packed whole after max_restarts") {
  replicated_table t;
  const auto live = keys_in(7, 2500);
  for (const auto& k : live) t.put(k, "spark-a", {}, ver(1000));
  auto dead = keys_in(7, 2000, 10'000'000);
  for (const auto& k : dead) t.erase(k, ver(1000), 1, 1000);
  repair_packer p({{7}}, 64);
  std::size_t expired = 0;
  const auto messages = drain(t, p, 1000, [&] {
    // Drops tombstones until one removal shifts the entries after it.
    for (const auto moves = t.bucket_moves(7); t.bucket_moves(7) == moves && expired < dead.size();)
      t.expire_tombstone(dead[expired++], 5000);
  });
  REQUIRE(expired < dead.size());
  const auto n = counted(messages);
  for (const auto& k : live) CHECK(n.count(k) == 1);
  CHECK(p.restarts() == repair_packer::max_restarts);
}

TEST_CASE("repair_packer: a handoff's entries and an empty repair") {
  replicated_table t;
  repair_packer handoff({}, 2);
  for (const auto& k : keys_in(digest_buckets, 5)) handoff.add(entry{k, "spark-a", {}, ver(1000), false, 0});
  std::vector<std::uint32_t> counts;
  for (int i = 0; i < 10 && !handoff.done(); ++i) {
    handoff.step(t);
    REQUIRE(handoff.ready());
    counts.push_back(handoff.take().count);
  }
  CHECK(counts == std::vector<std::uint32_t>{2, 2, 1});

  repair_packer agree({{0}, {1, 0}}, 4096);  // the table holds nothing in them
  agree.step(t);
  REQUIRE(agree.ready());
  CHECK(agree.take().empty());
  CHECK(agree.done());
}
