#pragma once
// The cluster protocol: what replicas send each other over caf::io (BASP),
// and how those types serialize. CAF 0.17: atoms are at most 10 characters.

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "actors/protocol.hpp"
#include "cluster/replicated_table.hpp"

namespace scg::cluster {

using hello_atom = caf::atom_constant<caf::atom("hello")>;        // a peer introduces itself (protocol 1's shape)
using hellov_atom = caf::atom_constant<caf::atom("hellov")>;      // the same, with its protocol versions first
using digest_atom = caf::atom_constant<caf::atom("digest")>;      // a peer's table digest (64 buckets)
using digestf_atom = caf::atom_constant<caf::atom("digestf")>;    // the same, by sub-bucket (protocol 3)
using entries_atom = caf::atom_constant<caf::atom("entries")>;    // a repair: entries that differ
using entriesp_atom = caf::atom_constant<caf::atom("entriesp")>;  // the same, packed (protocol 4)
using ack_atom = caf::atom_constant<caf::atom("ack")>;            // a repair taken
using delta_atom = caf::atom_constant<caf::atom("delta")>;        // a peer's local writes, pushed at once
using flush_atom = caf::atom_constant<caf::atom("flush")>;        // push the outbox
using dial_atom = caf::atom_constant<caf::atom("dial")>;          // dial the targets not connected
using probe_atom = caf::atom_constant<caf::atom("probe")>;        // look at this round's reachability probes again
using ae_atom = caf::atom_constant<caf::atom("ae")>;              // periodic anti-entropy
using ready_atom = caf::atom_constant<caf::atom("ready")>;        // the sync wait is over
using refresh_atom = caf::atom_constant<caf::atom("refresh")>;    // the next step of the refresh pass
using repair_step_atom = caf::atom_constant<caf::atom("rstep")>;  // the next step of a repair to a peer
using ack_due_atom = caf::atom_constant<caf::atom("ackdue")>;      // the oldest repair ack held back is due
using address_atom = caf::atom_constant<caf::atom("address")>;    // where peers reach us, once bound
using resolved_atom = caf::atom_constant<caf::atom("resolved")>;  // seed addresses found
using synced_atom = caf::atom_constant<caf::atom("synced")>;      // a peer's first sync is over: it owns keys now

/// The cluster actor: what its router sends it (actors/protocol.hpp), what
/// peers send (remote: they hold it as caf::actor, so a peer of another
/// version may send what it does not take; its default handler logs that),
/// and its own timers. The wire shapes predate the typed interface.
/// Versions (docs/cluster.md, "Protocol versions"): a replica greets with
/// hellov (protocol, min protocol, scg version, then hello's fields) and then,
/// while it speaks protocol 1, with the legacy hello, which v0.1.0 acts on
/// (it logs hellov as unexpected). Every other message keeps its shape within
/// a protocol version; a later version that changes one adds a new shape and
/// sends it only to members that announced that version.
using cluster_actor = actors::replication_actor::extend<
    // from peers
    caf::reacts_to<hellov_atom, std::uint32_t, std::uint32_t, std::string, std::string, std::string, caf::actor,
                   std::vector<std::string>>,  // protocol, min protocol, scg version, then as hello
    caf::reacts_to<hello_atom, std::string, std::string, caf::actor, std::vector<std::string>>,  // name, address, router, known addresses
    caf::reacts_to<digest_atom, std::vector<std::uint64_t>>,
    caf::reacts_to<digestf_atom, std::vector<std::uint64_t>>,
    caf::replies_to<entries_atom, std::vector<entry>, bool>::with<ack_atom>,  // entries, sync_reply (the last of a sync)
    // entries packed (cluster/packed_entries.hpp), how many, sync_reply
    caf::replies_to<entriesp_atom, std::string, std::uint32_t, bool>::with<ack_atom>,
    caf::reacts_to<delta_atom, std::vector<entry>>,
    caf::reacts_to<synced_atom>,
    // from start() and the seed resolver
    caf::reacts_to<address_atom, std::string>,
    caf::reacts_to<resolved_atom, std::vector<std::string>>,
    // self-addressed
    caf::reacts_to<flush_atom>, caf::reacts_to<dial_atom>, caf::reacts_to<ae_atom>, caf::reacts_to<ready_atom>,
    caf::reacts_to<refresh_atom>, caf::reacts_to<probe_atom>, caf::reacts_to<ack_due_atom>,
    caf::reacts_to<repair_step_atom, caf::actor_addr>>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hlc_time& x) {
  return f(caf::meta::type_name("hlc_time"), x.wall_ms, x.logical);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, version& x) {
  return f(caf::meta::type_name("version"), x.time, x.node);
}

/// An entry's last field on the wire is a tombstone's expiry when `deleted`,
/// else a live operation's start (0 for other keys). One field for both keeps
/// the wire format of replicas that predate operation starts: they read the
/// start of a live entry as an expiry they never look at, and send 0 back.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, entry& x) {
  std::uint64_t stamp = x.deleted ? x.tombstone_expires_ms : x.started_ms;
  auto unpack = caf::meta::load_callback([&]() -> caf::error {
    x.tombstone_expires_ms = x.deleted ? stamp : 0;
    x.started_ms = x.deleted ? 0 : stamp;
    return caf::none;
  });
  return f(caf::meta::type_name("entry"), x.key, x.backend, x.session, x.ver, x.deleted, stamp, unpack);
}

/// Registers the cluster's message types with CAF (before the system starts).
inline void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<entry>("scg_entry");
  cfg.add_message_type<std::vector<entry>>("scg_entries");
  cfg.add_message_type<std::vector<std::uint64_t>>("scg_u64s");
  cfg.add_message_type<std::vector<std::string>>("scg_strings");
  cfg.add_message_type<std::vector<caf::actor>>("scg_actors");
}

}  // namespace scg::cluster
