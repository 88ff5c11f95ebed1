// Hinted handoff: a member seen down may have missed writes from then on;
// when the same process is back (a partition or a freeze ended) it is sent
// the entries of every key written here since (write_log.hpp), so both
// sides agree within a round trip instead of waiting for a digest repair
// of every bucket the split touched.
#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "core/metrics.hpp"

namespace scg::cluster {

/// Member `name`, last heard at `last_seen_ms`, was seen down at `now_ms`:
/// what went to it since it was last heard, or since the link was silent
/// long enough to be dropped, may be lost, and is handed off when it is back.
void note_missed(self_ptr self, const std::string& name, std::int64_t last_seen_ms, std::int64_t now_ms) {
  const auto& cfg = self->state.cfg;
  self->state.missed_since[name] = missed_since_ms(
      last_seen_ms, now_ms, std::int64_t{cfg.connection_timeout_ms} + cfg.heartbeat_interval_ms, handoff_margin_ms);
}

/// Hinted handoff to member `name`, back up on `peer` after being seen down:
/// the entries in force of every key written here since writes to it may
/// have been lost, sent as a repair (acknowledged, in order). Only to the
/// same process (`restarted` false: a partition or a freeze ended); a new
/// one syncs by digest from one peer. Whether it was sent; when not, the
/// caller falls back to the digest.
bool hand_off(self_ptr self, const cluster_actor& peer, const std::string& name, bool restarted) {
  auto& st = self->state;
  auto since = st.missed_since.find(name);
  if (since == st.missed_since.end()) return false;  // never seen down: a newcomer, synced by digest
  const auto from_ms = since->second;
  st.missed_since.erase(since);
  if (restarted || !st.synced || st.repairing.count(peer.address())) return false;
  auto keys = st.written.since(from_ms);
  if (!keys) {
    core::bump(global_cluster_stats().cluster_handoff_fallbacks_total);
    log().info("handoff_fallback node={} reason=\"the write log does not reach back to {} ms before now; "
               "repaired by digest\"", name, core::wall_now_ms() - from_ms);
    return false;
  }
  auto job = new_repair_job(self, peer, {});
  std::size_t handed = 0;
  for (const auto& key : *keys)
    if (auto e = st.table->find(key)) {
      job->packer.add(*e);
      ++handed;
    }
  core::bump(global_cluster_stats().cluster_handoffs_total);
  log().info("handoff node={} entries={} since_ms={}", name, handed, core::wall_now_ms() - from_ms);
  st.repairing.emplace(peer.address(), job);
  repair_step(self, job);
  st.digest_held_until[name] = core::wall_now_ms() + digest_hold_ms;
  return true;
}

/// Whether member `name` was handed off to less than digest_hold_ms ago: no
/// digest to it yet (both sides then hold what the other handed over).
bool digest_held(self_ptr self, const std::string& name, std::int64_t now_ms) {
  auto& held = self->state.digest_held_until;
  auto it = held.find(name);
  if (it == held.end()) return false;
  if (now_ms < it->second) return true;
  held.erase(it);
  return false;
}

}  // namespace scg::cluster
