// The cluster actor's anti-entropy: digests sent to every member (when one
// comes up and every round), repairs of the buckets that differ sent in
// paced steps, the first full sync from one peer and the readiness it
// gives, and `synced` told to the peers that listen for it.
#include <algorithm>

#include "cluster/cluster_state.hpp"
#include "cluster/cluster_stats.hpp"
#include "cluster/protocol_version.hpp"
#include "cluster/wire_forms.hpp"
#include "core/metrics.hpp"

namespace scg::cluster {

/// Tells `peer` that this replica's first sync is over (it owns keys from
/// now on), when it is and the peer listens for it (protocol 2).
void tell_synced(self_ptr self, const cluster_actor& peer, const peer_version& theirs) {
  if (self->state.synced && announces_synced(theirs)) self->send(peer, synced_atom::value);
}

void mark_ready(self_ptr self, const char* why) {
  auto& st = self->state;
  if (st.synced) return;
  st.synced = true;
  st.membership_changed_ms = core::wall_now_ms();
  log().info("cluster_ready node={} reason=\"{}\" entries={} after_ms={}", st.cfg.node_name, why, st.table->size(),
             core::now_ms() - st.started_ms);
  if (st.on_ready) st.on_ready();
  // The peers other than the sync source get our digest now, not at the
  // next round: what they wrote while this replica was away and before
  // they counted it up reached the source too late for its repair, and a
  // new process is handed nothing off (a rolling upgrade's new replica then
  // lacked for up to 2 s a session a peer had just placed).
  for (const auto& [name, m] : st.members.members()) {
    if (!m.up) continue;
    tell_synced(self, m.link, m.version);
    if (m.link.address() != st.sync_source) send_digest(self, m);
  }
  publish_members(self);
}

/// The sync wait is over (cluster.sync_wait_secs), or looked at again. A
/// synced peer up means its repair may still be on the way (a large table,
/// a busy host): ready only when it ends, or when no synced peer is up, or
/// at last after sync_give_up; ready with half a table would rebind
/// sessions it has not heard of yet. Peers not synced themselves (a whole
/// cluster starting at once) hold nothing to wait for.
void check_ready(self_ptr self) {
  auto& st = self->state;
  if (st.synced) return;
  if (!st.members.synced_member_up()) return mark_ready(self, "sync wait over: no peer answered");
  if (core::now_ms() - st.started_ms >= sync_give_up_ms)
    return mark_ready(self, "sync wait over: a peer is up but its sync did not end");
  self->delayed_send(self, sync_recheck, ready_atom::value);
}

/// Whether to send our digest to `peer`, which asks it for a repair of what
/// differs. Until the first sync, only one peer is asked (the first one up):
/// every peer would otherwise send the whole table at once, and the joining
/// replica would take it as many times. Another one is asked when it leaves.
bool asks_repair_from(self_ptr self, const cluster_actor& peer) {
  auto& st = self->state;
  if (st.synced || st.sync_source == peer.address()) return true;
  for (const auto& [name, m] : st.members.members())
    if (m.up && m.link.address() == st.sync_source) return false;
  st.sync_source = peer.address();
  return true;
}

/// Our digest for member `m`: by sub-bucket when both speak protocol 3.
void send_digest(self_ptr self, const members_table::member& m) {
  const auto& t = *self->state.table;
  if (exchanges_fine_digest(common_protocol(self->state.members.self(), m.version)))
    self->send(m.link, digestf_atom::value, to_wire(t.fine()));
  else
    self->send(m.link, digest_atom::value, to_wire(t.digest()));
}

namespace {

/// Sends the next step of `job` to the back of the mailbox, once.
void queue_repair_step(self_ptr self, repair_job& job) {
  if (job.step_queued) return;
  job.step_queued = true;
  self->send(self, repair_step_atom::value, job.peer.address());
}

/// Sends the job's next packed message (an empty one when none is left).
void send_packed(self_ptr self, const std::shared_ptr<repair_job>& job) {
  auto done = [self, peer = job->peer] { self->state.repairing.erase(peer.address()); };
  auto part = job->packer.take();
  job->sent_last = job->packer.done();
  ++job->in_flight;
  core::bump(global_cluster_stats().cluster_repair_entries_sent_total, part.count);
  const bool sync_reply = job->sync_reply && job->sent_last;
  auto on_ack = [=](ack_atom) {
    --job->in_flight;
    if (job->failed) return;
    if (job->sent_last && job->in_flight == 0) return done();
    if (!job->step_queued) repair_step(self, job);
  };
  auto on_error = [=](const caf::error&) {  // the peer went away (or refused the bytes): the next round repairs
    if (job->failed) return;
    job->failed = true;
    done();
  };
  if (job->packed_wire)
    self->request(job->peer, repair_timeout, entriesp_atom::value, std::move(part.bytes), part.count, sync_reply)
        .then(on_ack, on_error);
  else
    self->request(job->peer, repair_timeout, entries_atom::value, unpacked(part), sync_reply).then(on_ack, on_error);
}

/// Answers the digest the current message carries: sends its sender what
/// differs (`parts`). Replicas send each other their digests (on connecting
/// and every round), so each pushes what differs and each side is repaired.
void repair(self_ptr self, std::vector<bucket_part> parts) {
  auto& st = self->state;
  auto sender = caf::actor_cast<cluster_actor>(self->current_sender());
  if (!sender || st.repairing.count(sender.address())) return;  // one repair per peer at a time
  // Until synced, this table is a partial copy of its sync source's:
  // nothing in it is news to the others.
  if (!st.synced && sender.address() != st.sync_source) return;
  auto job = new_repair_job(self, sender, std::move(parts));
  st.repairing.emplace(sender.address(), job);
  job->sync_reply = true;
  repair_step(self, job);
}

}  // namespace

/// One step of a repair: sends the peer this replica's entries of the job's
/// buckets, sync_chunk entries per message (about 400 KB), at most
/// repair_window messages it has not acknowledged. A step packs and sends
/// one message, a few milliseconds of work at most, then sends the next
/// step to the back of the mailbox while the window has room, so the
/// routers' questions wait for one message, not for a bucket (a million
/// bindings make 15,600 per bucket) or a whole sync. An entry written
/// meanwhile reaches the peer as a delta too, and the newer version wins
/// whichever comes first. A full sync of a large table thus holds a few
/// megabytes of messages on either side (CAF keeps a connection's buffer
/// at the largest size it ever had), and the deltas on the same connection
/// queue behind at most that, while the peer merges one message as the
/// next is built and sent. A peer of protocol 4 gets each message as one
/// byte string (entriesp), which CAF copies whole; an older one the vector
/// of entries CAF writes field by field. `sync_reply` rides on the last
/// message; a table that agrees sends one empty message.
void repair_step(self_ptr self, const std::shared_ptr<repair_job>& job) {
  if (job->failed || job->sent_last || job->in_flight >= repair_window) return;
  job->packer.step(*self->state.table);
  if (job->packer.ready()) send_packed(self, job);
  if (!job->sent_last && job->in_flight < repair_window) queue_repair_step(self, *job);
}

/// The next step of the repair to `peer`, queued by queue_repair_step.
void on_repair_step(self_ptr self, const caf::actor_addr& peer) {
  auto it = self->state.repairing.find(peer);
  if (it == self->state.repairing.end()) return;  // over (the peer went down)
  auto job = it->second;
  job->step_queued = false;
  repair_step(self, job);
}

/// A repair job for `peer` of the `parts` of buckets that differ, in the wire form the two speak.
std::shared_ptr<repair_job> new_repair_job(self_ptr self, const cluster_actor& peer, std::vector<bucket_part> parts) {
  auto job = std::make_shared<repair_job>(repair_job{peer, repair_packer(std::move(parts), sync_chunk)});
  job->packed_wire = sends_packed_repairs(self->state.members.protocol_with(peer));
  return job;
}

/// A peer's 64-bucket digest: it is sent the buckets that differ.
caf::result<void> on_digest(self_ptr self, const std::vector<std::uint64_t>& theirs) {
  if (!listening(self)) return caf::skip;
  greet_if_stray(self);
  repair(self, differing_whole_buckets(self->state.table->digest(), bucket_digest_from(theirs)));
  return {};
}

/// A peer's digest by sub-bucket (protocol 3): it is sent the sub-buckets that differ.
caf::result<void> on_fine_digest(self_ptr self, const std::vector<std::uint64_t>& theirs) {
  if (!listening(self)) return caf::skip;
  greet_if_stray(self);
  const auto d = fine_digest_from(theirs);
  if (!d) {
    dropped_message("digest_refused size=" + std::to_string(theirs.size()) + " reason=\"a fine digest has " +
                    std::to_string(fine_buckets) + " hashes\"");
    return {};
  }
  repair(self, differing_parts(self->state.table->fine(), *d));
  return {};
}

/// Every anti_entropy_interval: departed members forgotten, our digest to
/// every member up (but one just handed off to, and, until synced, all but
/// the sync source), a refresh pass when one is due, the view refreshed.
void anti_entropy_round(self_ptr self) {
  auto& st = self->state;
  forget_departed(self);
  const auto now = core::wall_now_ms();
  for (const auto& [name, m] : st.members.members()) {
    if (digest_held(self, name, now)) continue;
    if (m.up && asks_repair_from(self, m.link)) send_digest(self, m);
  }
  start_refresh(self);
  publish_view(self);
  self->delayed_send(self, anti_entropy_interval, ae_atom::value);
}

}  // namespace scg::cluster
