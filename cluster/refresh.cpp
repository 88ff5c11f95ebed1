// The refresh pass: one pass over the replicated table per refresh period
// (refresh_sweep.hpp judges each entry: touch, expire, or drop a tombstone),
// in steps the actor paces to a share of one core.
#include <chrono>

#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "core/metrics.hpp"
#include "core/pacing.hpp"

namespace scg::cluster {

/// One step of the pass, of about refresh_step_budget: each step sends the
/// next to the back of the mailbox, so the router's look-ups and the peers'
/// messages wait for one step, not for a pass over the whole table; and a
/// step comes no sooner than keeps the pass's work to refresh_share of the
/// time since it began.
void refresh_step(self_ptr self) {
  const auto began = std::chrono::steady_clock::now();
  auto& st = self->state;
  if (!st.refresh) return;
  const auto wall = core::wall_now_ms();
  const auto steady = core::now_ms();
  refresh_batch found;
  // A step ends once it has used about refresh_step_budget, whatever its
  // entries cost (a look-up of each binding's use in a table in steady use,
  // none in one just filled), as the router's sweep step does.
  do {
    st.refresh = st.table->for_each_step(*st.refresh, refresh_slots, [&](const entry_view& e) {
      judge_for_refresh(e, st.ttls, *st.sessions, wall, steady, found);
    });
  } while (!st.refresh->done() && std::chrono::steady_clock::now() - began < refresh_step_budget);
  for (auto& e : found.touch) write_local(self, entry{e.key, e.backend, e.session, {}, false, 0, e.started_ms});
  for (auto& key : found.expire) {
    write_local(self, entry{key, {}, {}, {}, true, 0});
    apply(st, *st.table->find(key));
    core::bump(global_cluster_stats().cluster_entries_expired_total);
  }
  for (const auto& key : found.forget) st.table->expire_tombstone(key, static_cast<std::uint64_t>(wall));
  st.refresh_work += std::chrono::steady_clock::now() - began;
  if (!st.refresh->done()) {
    // Paced to refresh_share of one core: replicas run their passes at the
    // same time on shared cores, and a pass that took a core whole would
    // keep the routers' decisions waiting for one.
    using std::chrono::microseconds;
    const auto wait = core::pace_delay(std::chrono::duration_cast<microseconds>(st.refresh_work),
                                       microseconds((core::now_ms() - st.refresh_started_ms) * 1000), refresh_share);
    if (wait.count() > 0) return self->delayed_send(self, wait, refresh_atom::value);
    return self->send(self, refresh_atom::value);
  }
  st.refresh.reset();
  global_cluster_stats().refresh_pass.observe(core::decision_bounds_us, static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(st.refresh_work).count()));
}

/// Starts a refresh pass when one is due and none is under way. Not before
/// the first sync is over: the table is still filling (a pass over a
/// million bindings as they arrive would slow the sync), and what a pass
/// decides, its sync source decides meanwhile.
void start_refresh(self_ptr self) {
  auto& st = self->state;
  const auto now = core::now_ms();
  if (!st.synced || st.refresh) return;
  const auto period = refresh_period_ms(st.ttls, std::chrono::milliseconds(anti_entropy_interval).count());
  if (st.refresh_started_ms != 0 && now - st.refresh_started_ms < period) return;
  st.refresh_started_ms = now;
  st.refresh.emplace();
  st.refresh_work = {};
  refresh_step(self);
}

}  // namespace scg::cluster
