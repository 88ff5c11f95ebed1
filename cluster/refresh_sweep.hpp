#pragma once
// The refresh pass's judgement of each entry: keeps in-use bindings alive
// cluster-wide and deletes abandoned ones. An entry used here since its
// version is a quarter ttl old is written again (a touch, replicated like
// any write); one whose version and local use are both older than the ttl
// becomes a tombstone, so every replica forgets it; a tombstone past its
// expiry is dropped. Pure, no actors (tests/unit/refresh_sweep_test.cpp);
// cluster/refresh.cpp walks the table in paced steps and acts on it.

#include <cstdint>
#include <string>
#include <vector>

#include "actors/session_table.hpp"
#include "cluster/replicated_table.hpp"

namespace scg::cluster {

/// The bindings' times to live (ms): `affinity.session_ttl_secs`, `affinity.op_ttl_secs`.
struct binding_ttls {
  std::int64_t session_ms = 0;
  std::int64_t op_ms = 0;
};

/// What a step of the pass found to do.
struct refresh_batch {
  std::vector<entry> touch;         ///< bindings in use here: written again
  std::vector<std::string> expire;  ///< bindings nobody used for a ttl: deleted cluster-wide
  std::vector<std::string> forget;  ///< tombstones past their expiry: dropped here
};

/// Adds to `out` what becomes of `e`, seen at wall time `wall_ms` and steady
/// time `steady_ms`; `used` is the data path's table, which knows each
/// binding's last use on this replica (steady ms; 0 for one only learned
/// from a peer, which is no use). Drains, health and load never expire.
void judge_for_refresh(const entry_view& e, const binding_ttls& ttls, const actors::session_table& used,
                       std::int64_t wall_ms, std::int64_t steady_ms, refresh_batch& out);

/// How often a refresh pass starts (ms): a sixteenth of the shorter ttl,
/// between `round_ms` (one anti-entropy round) and a minute. A touch thus
/// comes at most that late after the quarter ttl that calls for it, well
/// inside the ttl that binding_fate leaves, and a pass over a million
/// bindings (about a second of one core) costs a replica a few percent of
/// a core, not half of one.
std::int64_t refresh_period_ms(const binding_ttls& ttls, std::int64_t round_ms);

}  // namespace scg::cluster
