// The cluster actor: one per replica. It
//   - publishes itself on cluster.bind_addr and dials the seeds (each address
//     a seed name resolves to), re-dialing with backoff;
//   - greets peers with its node name and protocol versions and gossips the
//     addresses it knows, so the replicas form a full mesh; refuses a peer
//     that speaks no protocol version it speaks;
//   - versions local writes (hybrid logical clock + node name), pushes them
//     in micro-batches, merges what peers send (newest version wins), hands
//     a member back up after a partition the writes it missed (write_log.hpp)
//     and repairs what was lost by digest anti-entropy on (re)connect and
//     periodically;
//   - mirrors the replicated table into the data path's session table;
//   - tells the router which members are up, so it can ask a key's owner.
#include "cluster/cluster.hpp"
#include "cluster/cluster_guard.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "actors/backend_set.hpp"
#include "actors/protocol.hpp"
#include "cluster/membership.hpp"
#include "cluster/messages.hpp"
#include "cluster/packed_entries.hpp"
#include "cluster/repair_packer.hpp"
#include "cluster/protocol_version.hpp"
#include "cluster/reach_probe.hpp"
#include "cluster/write_log.hpp"
#include "core/address.hpp"
#include "core/clock.hpp"
#include "core/metrics.hpp"
#include "core/pacing.hpp"
#include "core/replicated_key.hpp"
#include "core/throttle.hpp"

namespace scg::cluster {

namespace {

using namespace std::chrono_literals;

constexpr auto default_flush_delay = 5ms;   // micro-batch window for deltas
constexpr std::size_t sync_chunk = 4096;    // entries per repair or delta message, at most
constexpr std::size_t refresh_slots = 512;   // table slots of the refresh pass per look at the clock
constexpr auto refresh_step_budget = std::chrono::microseconds(300);  // the actor's time per refresh step, about
constexpr double refresh_share = 0.25;        // of one core, at most, for a refresh pass (refresh_step)
constexpr double merge_share = 0.6;           // of one core, at most, for merging a burst of repairs (paced_ack)
constexpr auto merge_burst_gap = 1s;          // a repair this long after the last one starts a new burst
constexpr auto merge_free = 20ms;             // a burst's first merge work, never held back
constexpr auto repair_timeout = 30s;        // for the peer to take one
constexpr auto leave_timeout = 1500ms;      // for each peer to take the last writes at SIGTERM
constexpr int repair_window = 4;            // repair messages not yet acknowledged, at most
constexpr caf::atom_value registry_key = caf::atom("scgcluster");  // where stop() finds the actor
constexpr auto anti_entropy_interval = 2s;  // digest exchange with every member
constexpr std::int64_t sync_give_up_ms = 60'000;  // the longest a sync in progress holds readiness back
constexpr auto sync_recheck = 250ms;              // how often readiness looks again while it waits on one
constexpr auto dial_interval = 250ms;         // also how long a reachability probe may stay pending
constexpr auto probe_poll = 25ms;             // how often a round's pending probes are looked at again
constexpr std::uint64_t resolve_every = 20;  // dial rounds between DNS look-ups of the seeds (5 s)
constexpr std::uint64_t tombstone_ttl_ms = 10 * 60 * 1000;  // longer than any partition we repair
// Hinted handoff: the last keys written here (about 10 MB), which reach back
// a few minutes at thousands of writes a second; writes from this long
// before a member was last heard are handed to it too (lost on the way).
constexpr std::size_t write_log_capacity = 128 * 1024;
constexpr std::int64_t handoff_margin_ms = 1000;
// After a handoff, the digest waits this long: both sides then hold what the
// other handed over, and the digests differ only where neither knew.
constexpr std::int64_t digest_hold_ms = 1000;

/// The plain-TCP cluster port's guard, from start() to stop() (one cluster per process).
std::unique_ptr<cluster_guard> guard;

/// A repair under way to one peer: its messages, packed a step at a time
/// (from the buckets that differ, or a handoff's entries), and those the
/// peer has not acknowledged.
struct repair_job {
  cluster_actor peer;
  repair_packer packer;
  bool sync_reply = false;  // the peer may report ready after the last message
  bool packed_wire = false;  // the peer takes entriesp (protocol 4)
  int in_flight = 0;
  bool step_queued = false;  // a repair_step_atom for it waits in the mailbox
  bool sent_last = false;
  bool failed = false;
};

/// A packed message as the vector of entries a peer before protocol 4 takes.
std::vector<entry> unpacked(const packed_entries& p) {
  std::vector<entry> out;
  out.reserve(p.count);
  packed_reader in(p.bytes);
  for (entry e; in.next(e);) out.push_back(e);
  return out;
}

}  // namespace

/// Members reached through their cluster actors; their routers as the peers
/// sent them (the router casts them: actors::peer_router_actor).
using members_table = membership<cluster_actor, caf::actor>;

struct cluster_state {
  config::cluster cfg;
  std::int64_t session_ttl_ms = 0;
  std::int64_t op_ttl_ms = 0;
  std::string self_address;  // what peers dial to reach us
  hlc clock{[] { return static_cast<std::uint64_t>(core::wall_now_ms()); }};
  std::shared_ptr<replicated_table> table;  // the router reads it too (live_backend)
  std::shared_ptr<actors::session_table> sessions;
  actors::backend_list backends;
  actors::router_actor router;
  std::shared_ptr<cluster_view> view;
  std::function<void()> on_ready;
  bool synced = false;
  std::int64_t started_ms = core::now_ms();  // steady clock, for the time to readiness
  std::uint64_t conflicts = 0;
  /// Wall ms of the last membership change (a member up or down, this replica
  /// synced), the router's settle window (cluster.settle_ms) counts from it.
  std::int64_t membership_changed_ms = core::wall_now_ms();

  members_table members{""};  // the node name is set at start
  /// Repairs and handoffs being sent, by peer: one at a time to each.
  std::map<caf::actor_addr, std::shared_ptr<repair_job>> repairing;
  std::vector<entry> outbox;
  write_log written{write_log_capacity};  // keys written here lately, for handoffs
  /// Members seen down: from when (wall ms) writes sent to them may have been lost.
  std::map<std::string, std::int64_t> missed_since;
  /// Members just handed off to: no digest to them before this (wall ms).
  std::map<std::string, std::int64_t> digest_held_until;
  bool flush_scheduled = false;
  std::uint64_t dial_rounds = 0;
  /// Reachability probes under way (reach_probe.hpp), by address, with the dial round that started each.
  std::map<std::string, std::pair<reach_probe, std::uint64_t>> probes;
  /// The same for members held back for the other side's dial
  /// (membership::held_addresses); a probe that answered is closed, its round kept.
  std::map<std::string, std::pair<std::optional<reach_probe>, std::uint64_t>> held_probes;
  bool probe_poll_scheduled = false;
  bool resolving = false;  // a look-up of the seed names is under way
  // The refresh pass under way (refresh_step), if any, and its work so far.
  caf::actor_addr sync_source;  // until synced: the one peer asked for a full repair
  std::optional<replicated_table::cursor> refresh;
  std::int64_t refresh_started_ms = 0;  // steady clock: when the last pass began
  std::chrono::steady_clock::duration refresh_work{};
  // Repairs merged here are paced (paced_ack): the burst under way, its
  // merge work so far, and the acknowledgments held back, oldest first.
  std::chrono::steady_clock::time_point merge_burst_started, merge_last;
  std::chrono::microseconds merge_work{};
  std::deque<caf::typed_response_promise<ack_atom>> held_acks;
  static inline const char* name = "cluster";
};

namespace {

using self_ptr = cluster_actor::stateful_pointer<cluster_state>;

spdlog::logger& log() {
  static const auto l = spdlog::get("cluster");
  return *l;
}

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

void publish_view(self_ptr self) {
  auto& st = self->state;
  st.view->set(st.members.view(st.self_address, core::wall_now_ms(), st.synced), st.conflicts, st.synced);
}

/// Tells the router who is up (names, their routers and the newest protocol
/// each announced), self excluded, and who owns keys: the members whose
/// first sync is over, self included once synced. A replica still syncing
/// would decide a new session with a partial table, while its mailbox holds
/// the repair; the next owner decides instead.
void publish_members(self_ptr self) {
  auto& st = self->state;
  std::vector<std::string> names, owners;
  std::vector<caf::actor> routers;
  std::vector<std::uint32_t> protocols;
  for (const auto& [name, m] : st.members.members()) {
    if (!m.up) continue;
    names.push_back(name);
    routers.push_back(m.router);
    protocols.push_back(m.version.protocol);
    if (m.synced) owners.push_back(name);
  }
  if (st.synced) owners.push_back(st.cfg.node_name);
  self->send(st.router, actors::members_atom::value, std::move(names), std::move(routers), std::move(protocols),
             std::move(owners), st.membership_changed_ms);
  publish_view(self);
}

/// A peer's message this replica cannot use (another version's, or
/// malformed): counted, and logged at most once per 10 s with how many were
/// held back (a peer repeats such a message every round).
void dropped_message(const std::string& what) {
  static core::log_throttle throttle;
  core::bump(core::global_metrics().cluster_messages_dropped_total);
  if (auto held = throttle.pass(); held >= 0) log().warn("{} held_back={}", what, held);
}

/// Tells `peer` that this replica's first sync is over (it owns keys from
/// now on), when it is and the peer listens for it (protocol 2).
void tell_synced(self_ptr self, const cluster_actor& peer, const peer_version& theirs) {
  if (self->state.synced && announces_synced(theirs)) self->send(peer, synced_atom::value);
}

void send_digest(self_ptr self, const members_table::member& m);

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

std::vector<std::uint64_t> digest_of(const replicated_table& t) {
  auto d = t.digest();
  return {d.begin(), d.end()};
}

bucket_digest to_digest(const std::vector<std::uint64_t>& v) {
  bucket_digest d{};
  for (std::size_t i = 0; i < d.size() && i < v.size(); ++i) d[i] = v[i];
  return d;
}

/// Our digest for member `m`: by sub-bucket when both speak protocol 3.
void send_digest(self_ptr self, const members_table::member& m) {
  const auto& t = *self->state.table;
  if (exchanges_fine_digest(common_protocol(self->state.members.self(), m.version)))
    self->send(m.link, digestf_atom::value, std::vector<std::uint64_t>(t.fine().begin(), t.fine().end()));
  else
    self->send(m.link, digest_atom::value, digest_of(t));
}


void repair_step(self_ptr self, const std::shared_ptr<repair_job>& job);

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
  core::bump(core::global_metrics().cluster_repair_entries_sent_total, part.count);
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

/// A repair job for `peer` of the `parts` of buckets that differ, in the wire form the two speak.
std::shared_ptr<repair_job> new_repair_job(self_ptr self, const cluster_actor& peer, std::vector<bucket_part> parts) {
  auto job = std::make_shared<repair_job>(repair_job{peer, repair_packer(std::move(parts), sync_chunk)});
  job->packed_wire = sends_packed_repairs(self->state.members.protocol_with(peer));
  return job;
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

/// `batch` in messages of sync_chunk entries at most, its entries moved: a
/// refresh step's thousands of touches would otherwise be one message that
/// every peer deserializes and merges before the next on the connection.
std::vector<std::vector<entry>> in_parts(std::vector<entry> batch) {
  std::vector<std::vector<entry>> parts;
  if (batch.size() <= sync_chunk) {
    parts.push_back(std::move(batch));
    return parts;
  }
  for (auto it = batch.begin(); it != batch.end();) {
    const auto end = it + std::min<std::ptrdiff_t>(sync_chunk, batch.end() - it);
    parts.emplace_back(std::make_move_iterator(it), std::make_move_iterator(end));
    it = end;
  }
  return parts;
}

/// The micro-batch window. The test-only environment variable
/// SCG_TEST_FLUSH_DELAY_MS holds writes longer, so a test can stop a replica
/// while writes wait in its outbox (tests/integration/cluster_test.cpp); it
/// is no setting and no contract.
std::chrono::milliseconds flush_delay() {
  static const auto delay = [] {
    const char* n = std::getenv("SCG_TEST_FLUSH_DELAY_MS");
    char* end = nullptr;
    const auto ms = n ? std::strtoul(n, &end, 10) : 0;
    return n && end != n && *end == '\0' && ms < 600'000 ? std::chrono::milliseconds(ms) : default_flush_delay;
  }();
  return delay;
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
    self->delayed_send(self, flush_delay(), flush_atom::value);
  }
  return in_force;
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
  const auto parts = in_parts(std::move(st.outbox));  // one part, maybe empty, at least
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

/// Keeps in-use bindings alive cluster-wide and deletes abandoned ones: an
/// entry used here since its version is a quarter ttl old is written again
/// (a touch, replicated like any write); one whose version and local use are
/// both older than the ttl becomes a tombstone, so every replica forgets it;
/// a tombstone past its expiry is dropped. One pass over the table per
/// refresh period, in steps of about refresh_step_budget: each step sends
/// the next to the back of the mailbox, so the router's look-ups and the
/// peers' messages wait for one step, not for a pass over the whole table; and a step comes no
/// sooner than keeps the pass's work to refresh_share of the time since it
/// began.
void refresh_step(self_ptr self) {
  const auto began = std::chrono::steady_clock::now();
  auto& st = self->state;
  if (!st.refresh) return;
  const auto wall = core::wall_now_ms();
  const auto steady = core::now_ms();
  std::vector<entry> touch;
  std::vector<std::string> expire, forget;
  auto visit = [&](const entry_view& e) {
    if (e.deleted && e.tombstone_expires_ms <= static_cast<std::uint64_t>(wall)) forget.emplace_back(e.key);
    const auto k = core::parse_key(e.key);
    if (e.deleted || !k || !core::is_binding(k->kind)) return;  // drains do not expire
    const bool session = k->kind == core::key_kind::session;
    const std::int64_t ttl = session ? st.session_ttl_ms : st.op_ttl_ms;
    const auto written = static_cast<std::int64_t>(e.time.wall_ms);
    if (kept_whatever_use(written, wall, ttl)) return;
    const auto id = e.key.substr(2);
    auto seen = session ? st.sessions->session_last_seen(id) : st.sessions->op_last_seen(id);
    const std::int64_t used = seen && *seen > 0 ? wall - (steady - *seen) : 0;
    switch (binding_fate(written, used, wall, ttl)) {
      case fate::keep: break;
      case fate::touch: touch.push_back(e.to_entry()); break;
      case fate::expire: expire.emplace_back(e.key); break;
    }
  };
  // A step ends once it has used about refresh_step_budget, whatever its
  // entries cost (a look-up of each binding's use in a table in steady use,
  // none in one just filled), as the router's sweep step does.
  do {
    st.refresh = st.table->for_each_step(*st.refresh, refresh_slots, visit);
  } while (!st.refresh->done() && std::chrono::steady_clock::now() - began < refresh_step_budget);
  for (auto& e : touch) write_local(self, entry{e.key, e.backend, e.session, {}, false, 0, e.started_ms});
  for (auto& key : expire) {
    write_local(self, entry{key, {}, {}, {}, true, 0});
    apply(st, *st.table->find(key));
    core::bump(core::global_metrics().cluster_entries_expired_total);
  }
  for (const auto& key : forget) st.table->expire_tombstone(key, static_cast<std::uint64_t>(wall));
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
  auto& m = core::global_metrics();
  m.refresh_pass.observe(m.decision_bounds_us, static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(st.refresh_work).count()));
}

/// How often a refresh pass starts: a sixteenth of the shorter ttl, between
/// one anti-entropy round (2 s) and a minute. A touch thus comes at most that
/// late after the quarter ttl that calls for it, well inside the ttl that
/// binding_fate leaves, and a pass over a million bindings (about a second
/// of one core) costs a replica a few percent of a core, not half of one.
std::int64_t refresh_period_ms(const cluster_state& st) {
  const auto period = std::min(st.session_ttl_ms, st.op_ttl_ms) / 16;
  return std::clamp<std::int64_t>(period, std::chrono::milliseconds(anti_entropy_interval).count(), 60'000);
}

/// Starts a refresh pass when one is due and none is under way. Not before
/// the first sync is over: the table is still filling (a pass over a
/// million bindings as they arrive would slow the sync), and what a pass
/// decides, its sync source decides meanwhile.
void start_refresh(self_ptr self) {
  auto& st = self->state;
  const auto now = core::now_ms();
  if (!st.synced || st.refresh) return;
  if (st.refresh_started_ms != 0 && now - st.refresh_started_ms < refresh_period_ms(st)) return;
  st.refresh_started_ms = now;
  st.refresh.emplace();
  st.refresh_work = {};
  refresh_step(self);
}

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
  auto& metrics = core::global_metrics();
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
/// most merge_share of one core. The sender sends at most repair_window
/// messages ahead of its acks, so a full sync (a million entries: about a
/// core-second of merging here, two thirds of that at the sender) leaves
/// the cores of a shared host to the data path; measured: placement p99 at
/// the sync source 13-18 ms unpaced (docs/cluster.md, Measured). A burst's
/// first merge_free of work is never held: handoffs and digest rounds are
/// acknowledged at once.
caf::result<ack_atom> paced_ack(self_ptr self, std::chrono::steady_clock::time_point began) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  if (began - st.merge_last > merge_burst_gap) {
    st.merge_burst_started = began;
    st.merge_work = {};
  }
  st.merge_last = now;
  st.merge_work += duration_cast<microseconds>(now - began);
  const auto wait = st.merge_work < merge_free
                        ? microseconds(0)
                        : core::pace_delay(st.merge_work, duration_cast<microseconds>(now - st.merge_burst_started),
                                           merge_share);
  if (wait.count() == 0 && st.held_acks.empty()) return ack_atom::value;
  // Acks leave in order: each ack_due delivers the oldest one held.
  auto rp = self->make_response_promise<ack_atom>();
  st.held_acks.push_back(rp);
  self->delayed_send(self, wait, ack_due_atom::value);
  return rp;
}

/// Drops members down for cluster.forget_after_secs (a scaled-down pod), with
/// their addresses: the dial list keeps what the seed names resolve to, so a
/// member that comes back is found again.
void forget_departed(self_ptr self) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  const auto gone = st.members.forget_departed(now, std::int64_t{st.cfg.forget_after_secs} * 1000);
  for (const auto& [name, m] : gone) {
    log().info("member_forgotten node={} address={} down_secs={}", name, m.address, (now - m.last_seen_ms) / 1000);
    st.missed_since.erase(name);
    st.digest_held_until.erase(name);
  }
  if (!gone.empty()) publish_members(self);
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
    core::bump(core::global_metrics().cluster_handoff_fallbacks_total);
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
  core::bump(core::global_metrics().cluster_handoffs_total);
  log().info("handoff node={} entries={} since_ms={}", name, handed, core::wall_now_ms() - from_ms);
  st.repairing.emplace(peer.address(), job);
  repair_step(self, job);
  st.digest_held_until[name] = core::wall_now_ms() + digest_hold_ms;
  return true;
}

/// Introduces this replica to `peer`: the versioned hello, then the legacy
/// one while this replica speaks protocol 1 (v0.1.0 peers act on that one and
/// log the other as unexpected; newer peers act on the first). Both come from
/// one actor to one actor, so they arrive in this order. The router goes as a
/// caf::actor, the type older replicas expect.
void greet(self_ptr self, const cluster_actor& peer) {
  auto& st = self->state;
  const auto& v = st.members.self();
  const auto router = caf::actor_cast<caf::actor>(st.router);
  self->send(peer, hellov_atom::value, v.protocol, v.min_protocol, v.scg_version, st.cfg.node_name, st.self_address,
             router, st.members.known_addresses());
  if (sends_legacy_hello(v))
    self->send(peer, hello_atom::value, st.cfg.node_name, st.self_address, router, st.members.known_addresses());
}

/// What this replica announces: this build. The test-only environment
/// variable SCG_TEST_CLUSTER_PROTOCOL=N makes it announce protocol N alone,
/// so a test can start a peer this build cannot speak with
/// (tests/integration/upgrade_test.cpp); it is no setting and no contract.
peer_version announced_version() {
  auto v = this_build();
  if (const char* n = std::getenv("SCG_TEST_CLUSTER_PROTOCOL")) {
    char* end = nullptr;
    const auto p = std::strtoul(n, &end, 10);
    if (end != n && *end == '\0' && p > 0 && p < 1000) v.protocol = v.min_protocol = static_cast<std::uint32_t>(p);
  }
  return v;
}

/// A peer's hello, versioned (`announced`) or legacy (nullopt): membership
/// decides, this acts on its verdict.
void on_hello(self_ptr self, const std::string& name, const std::string& address, const caf::actor& router,
              const std::vector<std::string>& known, const std::optional<peer_version>& announced) {
  auto& st = self->state;
  auto sender = caf::actor_cast<cluster_actor>(self->current_sender());
  // A hello whose sender's link broke on the way arrives without one:
  // nothing to answer, nobody to watch (the peer greets again).
  if (!sender) return;
  cluster_actor replaced;
  bool warn = false;
  using verdict = members_table::hello;
  switch (st.members.on_hello(sender, router, sender.node() == self->node(), name, address, known, announced,
                              core::wall_now_ms(), &replaced, &warn)) {
    case verdict::ours:
    case verdict::twin_again:
      break;
    case verdict::known:
      // It may be greeting because it saw this replica down (see greet_back)
      // and took it back: then it counts this replica unsynced, so owning
      // no keys, until told again (after the greeting, which it takes first).
      if (st.members.greet_back(name, core::wall_now_ms())) greet(self, sender);
      tell_synced(self, sender, st.members.members().at(name).version);
      break;
    case verdict::twin:
      greet(self, sender);  // once: so the other one learns of it too
      core::bump(core::global_metrics().cluster_duplicate_names_total);
      log().error("duplicate_node_name node={} address={} reason=\"another replica uses this node_name; "
                  "they cannot both be members\"", name, address);
      break;
    case verdict::bad_address:
      log().warn("hello_refused node={} reason=\"unusable address '{}'\"", name, address);
      break;
    case verdict::claimed:
      if (!warn) break;
      core::bump(core::global_metrics().cluster_duplicate_names_total);
      log().error("duplicate_node_name node={} address={} member_address={} reason=\"two replicas use this "
                  "node_name; the one seen first stays the member\"", name, address,
                  st.members.members().at(name).address);
      break;
    case verdict::refused: {
      if (!warn) break;
      const auto theirs = announced.value_or(legacy_peer());
      const auto& ours = st.members.self();
      core::bump(core::global_metrics().cluster_protocol_refused_total);
      log().error("peer_refused node={} address={} peer_protocols={}-{} peer_scg_version={} protocols={}-{} "
                  "scg_version={} reason=\"no cluster protocol version in common: replicas of these versions "
                  "cannot be mixed (docs/cluster.md, Protocol versions)\"", name, address, theirs.min_protocol,
                  theirs.protocol, theirs.scg_version.empty() ? "unknown" : theirs.scg_version, ours.min_protocol,
                  ours.protocol, ours.scg_version);
      greet(self, sender);  // once: so the peer learns of it and refuses too
      break;
    }
    case verdict::joined: {
      if (replaced) self->demonitor(replaced.address());
      self->monitor(sender);
      greet(self, sender);  // the other side learns us even if it did not dial
      const auto& m = st.members.members().at(name);
      if (!hand_off(self, sender, name, static_cast<bool>(replaced)) && asks_repair_from(self, sender))
        send_digest(self, m);
      const auto& v = m.version;
      tell_synced(self, sender, v);
      log().info("member_up node={} address={} protocol={} scg_version={}", name, address, v.protocol,
                 v.scg_version.empty() ? "unknown" : v.scg_version);
      st.membership_changed_ms = core::wall_now_ms();
      publish_members(self);
      break;
    }
  }
}

/// What came from the current sender (a digest, a delta, a repair) comes
/// only from a peer that counts this replica up: if this replica counts it
/// down, the split is one-way and a greeting mends it (membership::greet_stray).
void greet_if_stray(self_ptr self) {
  auto& st = self->state;
  const auto& from = self->current_sender();
  if (!from) return;
  const auto name = st.members.greet_stray(from, core::wall_now_ms());
  if (name.empty()) return;
  core::bump(core::global_metrics().cluster_one_way_greetings_total);
  log().warn("one_way_split node={} reason=\"it replicates to this replica, which counts it down: greeting it\"", name);
  greet(self, caf::actor_cast<cluster_actor>(from));
}

/// Peers are heard only once the address they would be greeted back with is
/// known (start() sends it right after publishing): until then their
/// messages wait in the mailbox.
bool listening(self_ptr self) { return !self->state.self_address.empty(); }

/// Connects to `address` through CAF's middleman and greets what answers.
void connect_to(self_ptr self, const std::string& address, const core::host_port& target) {
  // With TLS configured, the OpenSSL manager's middleman dials (mutual TLS).
  auto mm = self->state.cfg.tls ? self->system().openssl_manager().actor_handle()
                                : self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(5), caf::connect_atom::value, target.host, target.port)
        .then(
            [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
              auto peer = caf::actor_cast<cluster_actor>(ptr);
              if (!peer) return self->state.members.dial_dropped(address);
              self->state.members.dial_succeeded(address);
              greet(self, peer);
            },
            [=](const caf::error& err) {
              self->state.members.dial_failed(address, core::wall_now_ms());
              log().debug("dial_failed address={} reason=\"{}\"", address, self->system().render(err));
            });
}

void watch_probes(self_ptr self);
void watch_held(self_ptr self, bool start);

/// Dials every address due (membership decides which) once a reachability
/// probe found its port open; a name (not an IP literal) is dialed at once.
/// A probe still pending a round later lost its SYN (a partition, a frozen
/// host): a new one goes out instead of waiting for the kernel's retransmission.
void dial_due(self_ptr self) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  for (const auto& address : st.members.dial_now(now)) {
    const auto target = core::parse_host_port(address);  // dial_now checked it
    static core::log_throttle redials{std::chrono::seconds(1)};  // it dials again each round until greeted
    if (st.members.open_without_greeting(address, now))
      if (const auto held = redials.pass(); held >= 0)
        log().info("redial address={} held_back={} reason=\"its port is open and no greeting came: the other "
                   "side's dial did not reach it, dialing from this side too\"", address, held);
    auto it = st.probes.find(address);
    if (it != st.probes.end() && it->second.first.poll() == reach_probe::state::pending &&
        it->second.second < st.dial_rounds) {
      st.probes.erase(it);
      it = st.probes.end();
    }
    if (it == st.probes.end()) {
      auto probe = reach_probe::start(target->host, target->port);
      if (!probe) {
        connect_to(self, address, *target);
        continue;
      }
      it = st.probes.emplace(address, std::pair{std::move(*probe), st.dial_rounds}).first;
    }
    switch (it->second.first.poll()) {
      case reach_probe::state::open:
        st.probes.erase(it);
        connect_to(self, address, *target);
        break;
      case reach_probe::state::refused:
        st.probes.erase(it);
        st.members.dial_failed(address, core::wall_now_ms());
        break;
      case reach_probe::state::unreachable:  // as a lost SYN: a new probe next round, no backoff
        st.probes.erase(it);
        st.members.dial_dropped(address);
        break;
      case reach_probe::state::pending:
        st.members.dial_dropped(address);  // looked at again (watch_probes)
        break;
    }
  }
  watch_held(self, true);
  watch_probes(self);
}

/// Members seen down that wait for the other side's dial are probed too
/// (one probe a round each, `start`ing this round's), and what is found is
/// told to membership: a port open for a while with no greeting makes
/// dial_now dial it from this side.
void watch_held(self_ptr self, bool start) {
  auto& st = self->state;
  const auto now = core::wall_now_ms();
  const auto held = st.members.held_addresses(now);
  for (auto it = st.held_probes.begin(); it != st.held_probes.end();)  // no longer held: up, or dialed
    it = held.count(it->first) ? std::next(it) : st.held_probes.erase(it);
  for (const auto& address : held) {
    auto it = st.held_probes.find(address);
    if (start && (it == st.held_probes.end() || it->second.second < st.dial_rounds)) {
      const auto target = core::parse_host_port(address);
      auto probe = target ? reach_probe::start(target->host, target->port) : std::nullopt;
      it = st.held_probes.insert_or_assign(address, std::pair{std::move(probe), st.dial_rounds}).first;
    }
    if (it == st.held_probes.end() || !it->second.first) continue;
    auto& probe = it->second.first;
    switch (probe->poll()) {
      case reach_probe::state::open:
        st.members.held_port_open(address, now);
        probe.reset();
        break;
      case reach_probe::state::refused:
      case reach_probe::state::unreachable:
        st.members.held_port_shut(address);
        probe.reset();
        break;
      case reach_probe::state::pending:
        break;
    }
  }
}

/// While a probe of this dial round is pending (or open and not dialed yet),
/// it is looked at again every probe_poll: a link that heals is then dialed
/// as soon as a SYN of this round is answered, not a round later (a round's
/// probes are started again at the next one).
void watch_probes(self_ptr self) {
  auto& st = self->state;
  if (st.probe_poll_scheduled) return;
  const auto dial_probe_waits = std::any_of(st.probes.begin(), st.probes.end(), [&](auto& kv) {
    if (kv.second.second != st.dial_rounds) return false;
    const auto state = kv.second.first.poll();
    return state != reach_probe::state::refused && state != reach_probe::state::unreachable;
  });
  const auto held_probe_waits = std::any_of(st.held_probes.begin(), st.held_probes.end(), [&](auto& kv) {
    auto& [probe, round] = kv.second;
    return round == st.dial_rounds && probe && probe->poll() == reach_probe::state::pending;
  });
  if (!dial_probe_waits && !held_probe_waits) return;
  st.probe_poll_scheduled = true;
  self->delayed_send(self, probe_poll, probe_atom::value);
}

}  // namespace

cluster_actor::behavior_type cluster_behavior(self_ptr self, config::cluster cfg, config::affinity ttl,
                                              std::shared_ptr<replicated_table> replicated,
                                              std::shared_ptr<actors::session_table> sessions,
                                              actors::backend_list backends, actors::router_actor router,
                                              std::shared_ptr<cluster_view> view, std::function<void()> on_ready) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.members = members_table{st.cfg.node_name, announced_version()};
  st.session_ttl_ms = std::int64_t{ttl.session_ttl_secs} * 1000;
  st.op_ttl_ms = std::int64_t{ttl.op_ttl_secs} * 1000;
  st.table = std::move(replicated);
  st.sessions = std::move(sessions);
  st.backends = std::move(backends);
  st.router = std::move(router);
  st.view = std::move(view);
  st.on_ready = std::move(on_ready);

  // A peer of another version may answer a message it does not know with an
  // error: logged, never the end of this actor (CAF's default would be).
  self->set_error_handler([=](caf::error& err) {
    log().warn("peer_error reason=\"{}\"", self->system().render(err));
  });
  self->set_down_handler([=](const caf::down_msg& msg) {
    auto& members = self->state.members;
    const auto now = core::wall_now_ms();
    const auto& cfg = self->state.cfg;
    for (const auto& name : members.on_down(msg.source, now)) {
      const auto& m = members.members().at(name);
      log().warn("member_down node={} address={} reason=\"{}\"{}", name, m.address, self->system().render(msg.reason),
                 m.flapped ? " flapped=true" : "");
      self->state.membership_changed_ms = now;
      // What went to it since it was last heard, or since the link was
      // silent long enough to be dropped, may be lost: handed off when it is back.
      const auto silent_since = now - cfg.connection_timeout_ms - cfg.heartbeat_interval_ms;
      self->state.missed_since[name] = std::min(m.last_seen_ms, silent_since) - handoff_margin_ms;
    }
    // A repair to it is over: its messages went with the link (their answers
    // would come only at repair_timeout); the next one starts when it is back.
    if (auto r = self->state.repairing.find(msg.source); r != self->state.repairing.end()) {
      r->second->failed = true;
      self->state.repairing.erase(r);
    }
    publish_members(self);
  });

  self->set_default_handler([](caf::scheduled_actor* me, caf::message_view& x) {
    dropped_message("unexpected_message content=\"" + caf::to_string(x.content()) +
                    "\" reason=\"a peer of another scg version?\"");
    return caf::drop(me, x);
  });
  publish_members(self);
  return {
      // --- a backend joined the running set: apply what peers said of it -----
      [=](actors::backend_atom, const std::string& name) {
        auto& st = self->state;
        st.table->for_each([&](const entry_view& e) {
          const auto k = core::parse_key(e.key);
          if (e.backend == name || (k && k->id == name && !core::is_binding(k->kind))) apply(st, e.to_entry());
        });
      },

      // --- from peers -------------------------------------------------------
      [=](hellov_atom, std::uint32_t protocol, std::uint32_t min_protocol, const std::string& scg_version,
          const std::string& name, const std::string& address, const caf::actor& router,
          const std::vector<std::string>& known) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        on_hello(self, name, address, router, known, peer_version{protocol, min_protocol, scg_version});
        return {};
      },
      [=](hello_atom, const std::string& name, const std::string& address, const caf::actor& router,
          const std::vector<std::string>& known) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        on_hello(self, name, address, router, known, std::nullopt);
        return {};
      },
      [=](digest_atom, const std::vector<std::uint64_t>& theirs) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        greet_if_stray(self);
        std::vector<bucket_part> parts;
        for (auto b : differing_buckets(self->state.table->digest(), to_digest(theirs))) parts.push_back({b});
        repair(self, std::move(parts));
        return {};
      },
      [=](digestf_atom, const std::vector<std::uint64_t>& theirs) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        greet_if_stray(self);
        if (theirs.size() != fine_buckets) {
          dropped_message("digest_refused size=" + std::to_string(theirs.size()) + " reason=\"a fine digest has " +
                          std::to_string(fine_buckets) + " hashes\"");
          return {};
        }
        fine_digest d;
        std::copy(theirs.begin(), theirs.end(), d.begin());
        repair(self, differing_parts(self->state.table->fine(), d));
        return {};
      },
      [=](entries_atom, const std::vector<entry>& batch, bool sync_reply) -> caf::result<ack_atom> {
        if (!listening(self)) return caf::skip;
        greet_if_stray(self);
        const auto began = std::chrono::steady_clock::now();
        merge_batch(self, batch, false);
        if (sync_reply) mark_ready(self, "synced with a peer");
        return paced_ack(self, began);
      },
      [=](entriesp_atom, const std::string& bytes, std::uint32_t count, bool sync_reply) -> caf::result<ack_atom> {
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
      },
      [=](ack_due_atom) {
        auto& held = self->state.held_acks;
        if (held.empty()) return;
        held.front().deliver(ack_atom::value);
        held.pop_front();
      },
      [=](delta_atom, const std::vector<entry>& batch) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        greet_if_stray(self);
        merge_batch(self, batch, true);
        return {};
      },
      [=](synced_atom) -> caf::result<void> {
        if (!listening(self)) return caf::skip;
        if (self->state.members.on_synced(self->current_sender())) publish_members(self);
        return {};
      },

      // --- from the router ------------------------------------------------------
      [=](actors::put_atom, std::string& key, std::string& backend, std::string& session, std::uint64_t started_ms) {
        write_local(self, entry{std::move(key), std::move(backend), std::move(session), {}, false, 0, started_ms});
      },
      [=](actors::erase_atom, std::string& key) {
        write_local(self, entry{std::move(key), {}, {}, {}, true, 0});
      },
      [=](actors::release_atom, std::string& key) {
        // A session released through this replica. The router took it out of
        // the data path at once, but an older binding merged since (a peer's
        // decision during a partition, handed off at the heal) put it back:
        // the release's tombstone in force takes it out again.
        const auto in_force = write_local(self, entry{std::move(key), {}, {}, {}, true, 0});
        if (in_force.deleted) apply(self->state, in_force);
      },

      [=](actors::leave_atom) -> caf::result<std::uint32_t, std::uint32_t> {
        return leave(self);
      },

      // --- timers -------------------------------------------------------------
      [=](flush_atom) {
        auto& st = self->state;
        st.flush_scheduled = false;
        if (st.outbox.empty()) return;
        auto batch = std::move(st.outbox);
        st.outbox.clear();
        for (const auto& part : in_parts(std::move(batch)))
          for (const auto& [name, m] : st.members.members())
            if (m.up) self->send(m.link, delta_atom::value, part);
      },
      [=](dial_atom) {
        auto& st = self->state;
        // Seed names are re-resolved every few rounds: a scaled-up
        // StatefulSet's new pods appear under its headless Service name.
        if (st.dial_rounds++ % resolve_every == 0 && !st.resolving && !st.cfg.seeds.empty()) {
          // Look-ups may block for seconds: on a thread of their own, not
          // on one of the scheduler's two.
          st.resolving = true;
          self->spawn<caf::detached>(
              [seeds = st.cfg.seeds](caf::blocking_actor* resolver, const cluster_actor& cluster) {
                std::vector<std::string> addrs;
                for (const auto& seed : seeds) {
                  const auto hp = core::parse_host_port(seed);  // the config validated it
                  if (!hp) continue;
                  for (const auto& ip : actors::resolve_host(hp->host))
                    addrs.push_back(core::host_port{ip, hp->port}.str());
                }
                resolver->send(cluster, resolved_atom::value, std::move(addrs));
              },
              cluster_actor{self});
        }
        dial_due(self);
        self->delayed_send(self, dial_interval, dial_atom::value);
      },
      [=](probe_atom) {
        auto& st = self->state;
        st.probe_poll_scheduled = false;
        for (auto& [address, p] : st.probes)
          if (p.second == st.dial_rounds && p.first.poll() == reach_probe::state::open) return dial_due(self);
        watch_held(self, false);
        watch_probes(self);
      },
      [=](resolved_atom, const std::vector<std::string>& addrs) {
        self->state.resolving = false;
        for (const auto& a : addrs) self->state.members.add_target(a);
        dial_due(self);  // new ones at once
      },
      [=](ae_atom) {
        auto& st = self->state;
        forget_departed(self);
        const auto now = core::wall_now_ms();
        for (const auto& [name, m] : st.members.members()) {
          auto held = st.digest_held_until.find(name);
          if (held != st.digest_held_until.end()) {
            if (now < held->second) continue;
            st.digest_held_until.erase(held);
          }
          if (m.up && asks_repair_from(self, m.link)) send_digest(self, m);
        }
        start_refresh(self);
        publish_view(self);
        self->delayed_send(self, anti_entropy_interval, ae_atom::value);
      },
      [=](refresh_atom) { refresh_step(self); },
      [=](repair_step_atom, const caf::actor_addr& peer) {
        auto it = self->state.repairing.find(peer);
        if (it == self->state.repairing.end()) return;  // over (the peer went down)
        auto job = it->second;
        job->step_queued = false;
        repair_step(self, job);
      },
      [=](ready_atom) {
        // A synced peer up means its repair may still be on the way (a large
        // table, a busy host): ready only when it ends, or when no synced
        // peer is up, or at last after sync_give_up; ready with half a table
        // would rebind sessions it has not heard of yet. Peers not synced
        // themselves (a whole cluster starting at once) hold nothing to wait for.
        auto& st = self->state;
        if (st.synced) return;
        if (!st.members.synced_member_up()) return mark_ready(self, "sync wait over: no peer answered");
        if (core::now_ms() - st.started_ms >= sync_give_up_ms)
          return mark_ready(self, "sync wait over: a peer is up but its sync did not end");
        self->delayed_send(self, sync_recheck, ready_atom::value);
      },
      [=](address_atom, const std::string& address) {
        auto& st = self->state;
        st.self_address = address;
        st.members.add_self_address(address);
        log().info("cluster_listening node={} address={} seeds={}", st.cfg.node_name, address,
                   st.cfg.seeds.size());
        self->send(self, dial_atom::value);
        self->delayed_send(self, anti_entropy_interval, ae_atom::value);
        if (st.cfg.seeds.empty())
          mark_ready(self, "no seeds: first replica");
        else
          self->delayed_send(self, std::chrono::seconds(st.cfg.sync_wait_secs), ready_atom::value);
      },
  };
}

void configure(caf::actor_system_config& cfg, const config::cluster& c) {
  cfg.load<caf::io::middleman>();
  if (c.tls) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = c.tls->cert_file;
    cfg.openssl_key = c.tls->key_file;
    cfg.openssl_cafile = c.tls->ca_file;  // a CA makes the peer's certificate required
  }
  cfg.set("middleman.app-identifiers", std::vector<std::string>{c.identity});
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(c.heartbeat_interval_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(c.connection_timeout_ms)});
  add_message_types(cfg);
}

std::uint16_t start(caf::actor_system& sys, const config::cluster& c, const config::affinity& ttl,
                    std::shared_ptr<replicated_table> replicated, std::shared_ptr<actors::session_table> table,
                    actors::backend_list backends, const actors::router_ref& router,
                    std::shared_ptr<cluster_view> view, std::function<void()> on_ready) {
  const auto bind = core::parse_host_port(c.bind_addr, true);  // the config validated it
  if (!bind) {
    spdlog::get("cluster")->error("cluster_listen_failed bind_addr={} reason=\"not host:port\"", c.bind_addr);
    return 0;
  }
  const auto& [host, port] = *bind;
  // The address peers dial: the bind host, or this host's name for a wildcard.
  const bool wildcard = host == "0.0.0.0" || host == "::";
  std::string advertised = host;
  if (wildcard) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    advertised = buf;
  }
  // On the scheduler (seed names are resolved on a thread of their own): a
  // detached actor's thread would wait at exit for every reference to it.
  // Published untyped, as before the typed interfaces: the handshake peers
  // of older versions see is unchanged.
  auto actor = caf::actor_cast<caf::actor>(
      sys.spawn(cluster_behavior, c, ttl, std::move(replicated), table, backends, router.handle, view,
                std::move(on_ready)));
  // With TLS, CAF listens on bind_addr itself. Without, on a loopback port
  // behind the guard, which listens on bind_addr (cluster_guard.hpp).
  const char* in = wildcard ? nullptr : host.c_str();
  auto bound = c.tls ? caf::openssl::publish(actor, port, in, true)
                     : sys.middleman().publish(actor, 0, "127.0.0.1", true);
  std::string guard_error;
  if (bound && !c.tls) {
    guard = cluster_guard::start(c.bind_addr, *bound, std::chrono::milliseconds(c.connection_timeout_ms),
                                 guard_error);
    if (guard) bound = guard->port();
  }
  if (!bound || !guard_error.empty()) {
    spdlog::get("cluster")->error("cluster_listen_failed bind_addr={} reason=\"{}\"", c.bind_addr,
                                  bound ? guard_error : sys.render(bound.error()));
    if (bound) sys.middleman().unpublish(actor, 0);
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    return 0;
  }
  caf::anon_send(actor, address_atom::value, core::host_port{advertised, *bound}.str());
  sys.registry().put(registry_key, actor);
  return *bound;
}

void stop(caf::actor_system& sys) {
  if (auto actor = sys.registry().get<caf::actor>(registry_key)) {
    sys.registry().erase(registry_key);
    sys.middleman().unpublish(actor, 0);
    // Waits (briefly) for it to end: a request still waiting for a peer's
    // answer (a hand-off at SIGTERM) holds the actor, which frees it only
    // when it ends; the system would otherwise stop first and leak it.
    caf::scoped_actor waiter{sys};
    waiter->monitor(actor);
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    waiter->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(1)) >> [] {});
  }
  guard.reset();
}

}  // namespace scg::cluster
