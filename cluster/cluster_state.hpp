#pragma once
// The cluster actor's state, its constants, and the functions its message
// table calls, by the file that holds them. Internal to cluster/ (the API is
// cluster.hpp); one concern a file:
//   cluster_actor.cpp  the message table, start-up and stop, what the router is told
//   members.cpp        greetings, members up and down, one-way splits, departed members
//   dialing.cpp        dial rounds, reachability probes, seed look-ups
//   replication.cpp    local writes and their deltas, merging, mirroring into the data path
//   sync.cpp           digests, repairs, the first sync and readiness
//   handoff.cpp        hinted handoff to a member back up
//   refresh.cpp        the refresh pass (touch, expire, drop tombstones)

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/backend.hpp"
#include "actors/protocol.hpp"
#include "actors/session_table.hpp"
#include "cluster/cluster_view.hpp"
#include "cluster/hlc.hpp"
#include "cluster/membership.hpp"
#include "cluster/merge_pacer.hpp"
#include "cluster/messages.hpp"
#include "cluster/reach_probe.hpp"
#include "cluster/refresh_sweep.hpp"
#include "cluster/repair_packer.hpp"
#include "cluster/replicated_table.hpp"
#include "cluster/write_log.hpp"
#include "config/config.hpp"
#include "core/clock.hpp"

namespace scg::cluster {

// --- the numbers (docs/cluster.md, "The numbers") ----------------------------
constexpr auto default_flush_delay = std::chrono::milliseconds(5); // micro-batch window for deltas
constexpr std::size_t sync_chunk = 4096;                     // entries per repair or delta message, at most
constexpr std::size_t refresh_slots = 512;                   // table slots of the refresh pass per look at the clock
constexpr auto refresh_step_budget = std::chrono::microseconds(300); // the actor's time per refresh step, about
constexpr double refresh_share = 0.25;                       // of one core, at most, for a refresh pass
constexpr double merge_share = 0.6;                          // of one core, at most, merging a burst of repairs
constexpr auto merge_burst_gap = std::chrono::seconds(1);    // a repair this long after the last starts a burst
constexpr auto merge_free = std::chrono::milliseconds(20);   // a burst's first merge work, never held back
constexpr auto repair_timeout = std::chrono::seconds(30);    // for the peer to take one
constexpr auto leave_timeout = std::chrono::milliseconds(1500); // for each peer to take the last writes at SIGTERM
constexpr int repair_window = 4;                             // repair messages not yet acknowledged, at most
constexpr auto anti_entropy_interval = std::chrono::seconds(2); // digest exchange with every member
constexpr std::int64_t sync_give_up_ms = 60'000;             // the longest a sync in progress holds readiness back
constexpr auto sync_recheck = std::chrono::milliseconds(250); // how often readiness looks again while it waits on one
constexpr auto dial_interval = std::chrono::milliseconds(250); // also how long a reachability probe may stay pending
constexpr auto probe_poll = std::chrono::milliseconds(25);   // how often a round's pending probes are looked at again
constexpr std::uint64_t resolve_every = 20;                  // dial rounds between DNS look-ups of the seeds (5 s)
constexpr std::uint64_t tombstone_ttl_ms = 10 * 60 * 1000;   // longer than any partition we repair
// Hinted handoff: the last keys written here (about 10 MB), which reach back
// a few minutes at thousands of writes a second; writes from this long
// before a member was last heard are handed to it too (lost on the way).
constexpr std::size_t write_log_capacity = 128 * 1024;
constexpr std::int64_t handoff_margin_ms = 1000;
// After a handoff, the digest waits this long: both sides then hold what the
// other handed over, and the digests differ only where neither knew.
constexpr std::int64_t digest_hold_ms = 1000;

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

/// Members reached through their cluster actors; their routers as the peers
/// sent them (the router casts them: actors::peer_router_actor).
using members_table = membership<cluster_actor, caf::actor>;

/// What start() hands the cluster actor (cluster.hpp says what each is).
struct cluster_setup {
  config::cluster cfg;
  config::affinity ttl;
  std::shared_ptr<replicated_table> table;
  std::shared_ptr<actors::session_table> sessions;
  actors::backend_list backends;
  actors::router_actor router;
  std::shared_ptr<cluster_view> view;
  std::function<void()> on_ready;
};

struct cluster_state {
  config::cluster cfg;
  binding_ttls ttls;
  /// How long local writes wait in the outbox: the 5 ms window, or the
  /// hidden test-only setting (config::cluster::test_flush_delay_ms).
  std::chrono::milliseconds flush_delay = default_flush_delay;
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
  caf::actor_addr sync_source;  // until synced: the one peer asked for a full repair
  // The refresh pass under way (refresh_step), if any, and its work so far.
  std::optional<replicated_table::cursor> refresh;
  std::int64_t refresh_started_ms = 0;  // steady clock: when the last pass began
  std::chrono::steady_clock::duration refresh_work{};
  // Repairs merged here are paced (paced_ack); the acknowledgments held
  // back, oldest first.
  merge_pacer merging{merge_share, merge_free, merge_burst_gap};
  std::deque<caf::typed_response_promise<ack_atom>> held_acks;
  static inline const char* name = "cluster";
};

using self_ptr = cluster_actor::stateful_pointer<cluster_state>;

inline spdlog::logger& log() {
  static const auto l = spdlog::get("cluster");
  return *l;
}

// --- cluster_actor.cpp ---------------------------------------------------------
void publish_view(self_ptr self);
void publish_members(self_ptr self);
/// A peer's message this replica cannot use (another version's, or
/// malformed): counted, and logged at most once per 10 s.
void dropped_message(const std::string& what);
/// Peers are heard only once the address they would be greeted back with is
/// known (start() sends it right after publishing): until then their
/// messages wait in the mailbox (caf::skip).
inline bool listening(self_ptr self) { return !self->state.self_address.empty(); }

// --- members.cpp -----------------------------------------------------------------
void greet(self_ptr self, const cluster_actor& peer);
caf::result<void> on_hello(self_ptr self, const std::string& name, const std::string& address,
                           const caf::actor& router, const std::vector<std::string>& known,
                           const std::optional<peer_version>& announced);
void greet_if_stray(self_ptr self);
void on_down(self_ptr self, const caf::down_msg& msg);
caf::result<void> on_peer_synced(self_ptr self);
void forget_departed(self_ptr self);

// --- dialing.cpp -----------------------------------------------------------------
void dial_round(self_ptr self);
void on_probe_poll(self_ptr self);
void on_resolved(self_ptr self, const std::vector<std::string>& addrs);

// --- replication.cpp ---------------------------------------------------------
void apply(cluster_state& st, const entry& e);
void mirror_backend(self_ptr self, const std::string& name);
entry write_local(self_ptr self, entry e);
void release_local(self_ptr self, std::string key);
void flush(self_ptr self);
caf::result<std::uint32_t, std::uint32_t> leave(self_ptr self);
caf::result<ack_atom> on_entries(self_ptr self, const std::vector<entry>& batch, bool sync_reply);
caf::result<ack_atom> on_packed_entries(self_ptr self, const std::string& bytes, std::uint32_t count,
                                        bool sync_reply);
caf::result<void> on_delta(self_ptr self, const std::vector<entry>& batch);
void release_held_ack(self_ptr self);

// --- sync.cpp --------------------------------------------------------------------
void tell_synced(self_ptr self, const cluster_actor& peer, const peer_version& theirs);
void mark_ready(self_ptr self, const char* why);
void check_ready(self_ptr self);
bool asks_repair_from(self_ptr self, const cluster_actor& peer);
void send_digest(self_ptr self, const members_table::member& m);
caf::result<void> on_digest(self_ptr self, const std::vector<std::uint64_t>& theirs);
caf::result<void> on_fine_digest(self_ptr self, const std::vector<std::uint64_t>& theirs);
std::shared_ptr<repair_job> new_repair_job(self_ptr self, const cluster_actor& peer, std::vector<bucket_part> parts);
void repair_step(self_ptr self, const std::shared_ptr<repair_job>& job);
void on_repair_step(self_ptr self, const caf::actor_addr& peer);
void anti_entropy_round(self_ptr self);

// --- handoff.cpp -----------------------------------------------------------------
void note_missed(self_ptr self, const std::string& name, std::int64_t last_seen_ms, std::int64_t now_ms);
bool hand_off(self_ptr self, const cluster_actor& peer, const std::string& name, bool restarted);
bool digest_held(self_ptr self, const std::string& name, std::int64_t now_ms);

// --- refresh.cpp -----------------------------------------------------------------
void start_refresh(self_ptr self);
void refresh_step(self_ptr self);

}  // namespace scg::cluster
