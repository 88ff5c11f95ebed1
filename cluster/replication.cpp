// The cluster actor's replication path: local writes, versioned and pushed
// to the peers in micro-batches (deltas); what peers send merged (newest
// version wins) and mirrored into the data path's session table and the
// backends' states; the last writes handed to every peer at SIGTERM.
#include <algorithm>
#include <chrono>

#include "actors/backend_set.hpp"
#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "cluster/packed_entries.hpp"
#include "cluster/wire_forms.hpp"
#include "core/metrics.hpp"
#include "core/replicated_key.hpp"

namespace scg::cluster {

/// Mirrors an entry now in force into the data path's index.
void apply(cluster_state& st, const entry& e) {
  using core::key_kind;
  const auto k = core::parse_key(e.key);
  // A kind this build does not know is taken for an operation, as before kinds had names.
  const key_kind kind = k ? k->kind : key_kind::operation;
  const std::string id = e.key.size() > 2 ? e.key.substr(2) : std::string();
  const bool session = kind == key_kind::session;
  switch (kind) {
    case key_kind::drain:  // a backend drained (live) or undrained (deleted)
      if (auto b = actors::find_backend(st.backends, id)) st.backends[*b]->draining = !e.deleted;
      return;
    case key_kind::activity: {  // a replica's activity on a drained backend
      auto id_parts = actors::parse_activity_id(id);
      if (!id_parts || id_parts->first == st.cfg.node_name) return;  // this replica counts its own live
      if (auto b = actors::find_backend(st.backends, id_parts->second))
        st.backends[*b]->set_peer_report(
            id_parts->first, e.deleted ? std::nullopt : actors::decode_activity(e.backend),
            static_cast<std::int64_t>(e.ver.time.wall_ms));
      return;
    }
    case key_kind::health:  // a backend's health, from the replica that probes it
      if (auto b = actors::find_backend(st.backends, id); b && !e.deleted)
        st.backends[*b]->healthy = core::parse_health(e.backend).value_or(false);
      return;
    case key_kind::load: {  // a backend's utilization, from the replica that polls it
      auto b = actors::find_backend(st.backends, id);
      auto u = core::parse_load(e.backend);
      if (b && !e.deleted && u) st.backends[*b]->utilization = *u;
      return;
    }
    case key_kind::session:
    case key_kind::operation:
      break;
  }
  if (e.deleted) {
    if (session) {
      if (st.sessions->erase_session(id)) caf::anon_send(st.router, actors::forget_atom::value, id);
    } else {
      st.sessions->erase_op(id);
    }
    return;
  }
  auto b = actors::find_backend(st.backends, e.backend);
  if (!b) {
    log().warn("unknown_backend key_kind={} backend={} reason=\"backend lists differ between replicas\"",
               session ? "session" : "operation", e.backend);
    return;
  }
  // Last seen 0: a replicated entry is not use on this replica (see refresh_step).
  if (session)
    st.sessions->set_session(id, *b, 0);
  else
    st.sessions->add_op(id, *b, e.session, 0, static_cast<std::int64_t>(e.started_ms));
}

/// A backend joined the running set: what peers said of it is applied now.
void mirror_backend(self_ptr self, const std::string& name) {
  auto& st = self->state;
  st.table->for_each([&](const entry_view& e) {
    const auto k = core::parse_key(e.key);
    if (e.backend == name || (k && k->id == name && !core::is_binding(k->kind))) apply(st, e.to_entry());
  });
}

/// Versions and applies a local write, and queues it for the peers; the
/// entry in force for its key (a newer one may have been merged before).
entry write_local(self_ptr self, entry e) {
  auto& st = self->state;
  const auto now = st.clock.now();  // never behind the wall clock: write_log's order
  const entry& in_force =
      e.deleted ? st.table->erase(e.key, {now, st.cfg.node_name}, tombstone_ttl_ms,
                                  static_cast<std::uint64_t>(core::wall_now_ms()))
                : st.table->put(e.key, e.backend, e.session, {now, st.cfg.node_name}, e.started_ms);
  st.written.add(e.key, static_cast<std::int64_t>(now.wall_ms));
  // The router bound the session before this write reached us; an older
  // entry merged meanwhile (a peer's decision, handed off after a thaw) may
  // have rebound it in the data path. The write in force binds it again.
  if (!in_force.deleted && in_force.ver.node == st.cfg.node_name &&
      core::has_kind(in_force.key, core::key_kind::session))
    if (auto b = actors::find_backend(st.backends, in_force.backend))
      st.sessions->rebind_if_bound(in_force.key.substr(2), *b);
  st.outbox.push_back(in_force);
  if (!st.flush_scheduled) {
    st.flush_scheduled = true;
    self->delayed_send(self, st.flush_delay, flush_atom::value);
  }
  return in_force;
}

/// A session released through this replica. The router took it out of the
/// data path at once, but an older binding merged since (a peer's decision
/// during a partition, handed off at the heal) put it back: the release's
/// tombstone in force takes it out again.
void release_local(self_ptr self, std::string key) {
  const auto in_force = write_local(self, entry{std::move(key), {}, {}, {}, true, 0});
  if (in_force.deleted) apply(self->state, in_force);
}

/// The flush window is over: the outbox goes to every member up, as deltas.
void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  if (st.outbox.empty()) return;
  auto batch = std::move(st.outbox);
  st.outbox.clear();
  for (const auto& part : in_parts(std::move(batch), sync_chunk))
    for (const auto& [name, m] : st.members.members())
      if (m.up) self->send(m.link, delta_atom::value, part);
}

/// SIGTERM, the drain over: the outbox goes to every up peer at once, as an
/// entries request each peer acknowledges. A peer takes messages from one
/// sender in order, so its ack also covers every delta sent before. The
/// answer: the peers up, and those that acknowledged every part.
caf::result<std::uint32_t, std::uint32_t> leave(self_ptr self) {
  auto& st = self->state;
  std::vector<cluster_actor> peers;
  for (const auto& [name, m] : st.members.members())
    if (m.up) peers.push_back(m.link);
  const auto parts = in_parts(std::move(st.outbox), sync_chunk);  // one part, maybe empty, at least
  st.outbox.clear();
  auto rp = self->make_response_promise<std::uint32_t, std::uint32_t>();
  struct tally {
    std::size_t pending;
    std::vector<std::size_t> acked;  // parts, by peer
  };
  auto t = std::make_shared<tally>(tally{peers.size() * parts.size(), std::vector<std::size_t>(peers.size())});
  auto answer = [=, n = parts.size()]() mutable {
    if (--t->pending > 0) return;
    const auto whole = std::count(t->acked.begin(), t->acked.end(), n);
    rp.deliver(static_cast<std::uint32_t>(peers.size()), static_cast<std::uint32_t>(whole));
  };
  if (peers.empty()) rp.deliver(std::uint32_t{0}, std::uint32_t{0});
  for (std::size_t i = 0; i < peers.size(); ++i)
    for (const auto& part : parts)
      self->request(peers[i], leave_timeout, entries_atom::value, part, false)
          .then(
              [=](ack_atom) mutable {
                ++t->acked[i];
                answer();
              },
              [=](const caf::error&) mutable { answer(); });
  return rp;
}

namespace {

/// Merges entries from the peer that sent the current message: newest version
/// wins, conflicts counted and logged, what changed mirrored into the data
/// path. `each(f)` calls `f(const entry&)` for every entry of the message
/// (a vector's, or one at a time as they are unpacked). `delta`: local writes
/// the peer pushed at once, whose delay since their write is observed
/// (repairs carry old entries).
template <class Each>
void merge_entries(self_ptr self, bool delta, Each&& each) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  auto& metrics = global_cluster_stats();
  std::int64_t lag = 0;
  bool any = false;
  each([&](const entry& e) {
    any = true;
    st.clock.observe(e.ver.time);
    auto r = st.table->merge(e);
    // Backend state (health, load, drains) is rewritten by its owner as it
    // changes; only two different bindings of a session or operation conflict.
    const auto k = core::parse_key(e.key);
    if (r.conflict && k && core::is_binding(k->kind)) {
      ++st.conflicts;
      core::bump(metrics.cluster_conflicts_total);
      log().warn("conflict key_kind={} winner_node={}", core::to_string(k->kind),
                 st.table->find(e.key)->ver.node);
    }
    if (!r.applied) return;
    core::bump(metrics.cluster_entries_merged_total);
    apply(st, e);
    lag = std::max(lag, now - static_cast<std::int64_t>(e.ver.time.wall_ms));
    if (delta) {
      const auto delay_us = now_us - static_cast<std::int64_t>(e.ver.time.wall_ms) * 1000;
      metrics.replication_delay.observe(metrics.replication_bounds_us,
                                        static_cast<std::uint64_t>(std::max<std::int64_t>(delay_us, 0)));
    }
  });
  st.members.on_batch(self->current_sender(), now, any, lag);
}

void merge_batch(self_ptr self, const std::vector<entry>& batch, bool delta) {
  merge_entries(self, delta, [&](auto&& f) {
    for (const auto& e : batch) f(e);
  });
}

/// The acknowledgment of a repair message merged from `began` to now: at
/// once, or held back until the burst of repairs it belongs to has used at
/// most merge_share of one core (merge_pacer). The sender sends at most
/// repair_window messages ahead of its acks, so a full sync (a million
/// entries: about a core-second of merging here, two thirds of that at the
/// sender) leaves the cores of a shared host to the data path; measured:
/// placement p99 at the sync source 13-18 ms unpaced (docs/cluster.md,
/// Measured). A burst's first merge_free of work is never held: handoffs
/// and digest rounds are acknowledged at once.
caf::result<ack_atom> paced_ack(self_ptr self, std::chrono::steady_clock::time_point began) {
  auto& st = self->state;
  const auto wait = st.merging.merged(began, std::chrono::steady_clock::now());
  if (wait.count() == 0 && st.held_acks.empty()) return ack_atom::value;
  // Acks leave in order: each ack_due delivers the oldest one held.
  auto rp = self->make_response_promise<ack_atom>();
  st.held_acks.push_back(rp);
  self->delayed_send(self, wait, ack_due_atom::value);
  return rp;
}

}  // namespace

/// A repair (or SIGTERM's hand-off) as a vector of entries; `sync_reply`
/// on the last message of a sync.
caf::result<ack_atom> on_entries(self_ptr self, const std::vector<entry>& batch, bool sync_reply) {
  if (!listening(self)) return caf::skip;
  greet_if_stray(self);
  const auto began = std::chrono::steady_clock::now();
  merge_batch(self, batch, false);
  if (sync_reply) mark_ready(self, "synced with a peer");
  return paced_ack(self, began);
}

/// A repair packed in one byte string (protocol 4): `count` entries.
caf::result<ack_atom> on_packed_entries(self_ptr self, const std::string& bytes, std::uint32_t count,
                                        bool sync_reply) {
  if (!listening(self)) return caf::skip;
  greet_if_stray(self);
  const auto began = std::chrono::steady_clock::now();
  packed_reader in(bytes);
  merge_entries(self, false, [&](auto&& f) {
    for (entry e; in.next(e);) f(e);
  });
  if (!in.error().empty() || in.read() != count) {
    // What came before the bad bytes is merged; the sender drops the
    // rest of its repair, and the next digest round repairs it.
    const auto why = in.error().empty() ? std::to_string(in.read()) + " entries where the message announced " +
                                              std::to_string(count)
                                        : in.error();
    dropped_message("repair_refused bytes=" + std::to_string(bytes.size()) + " reason=\"" + why + "\"");
    return caf::make_error(caf::sec::invalid_argument, "repair refused: " + why);
  }
  if (sync_reply) mark_ready(self, "synced with a peer");
  return paced_ack(self, began);
}

/// A peer's local writes, pushed at once.
caf::result<void> on_delta(self_ptr self, const std::vector<entry>& batch) {
  if (!listening(self)) return caf::skip;
  greet_if_stray(self);
  merge_batch(self, batch, true);
  return {};
}

/// The oldest acknowledgment held back (paced_ack) is due.
void release_held_ack(self_ptr self) {
  auto& held = self->state.held_acks;
  if (held.empty()) return;
  held.front().deliver(ack_atom::value);
  held.pop_front();
}

}  // namespace scg::cluster
