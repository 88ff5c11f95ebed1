#pragma once
// The cluster protocol: what replicas send each other over caf::io (BASP),
// and how those types serialize. CAF 0.17: atoms are at most 10 characters.

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "cluster/replicated_table.hpp"

namespace scg::cluster {

// cluster actor ↔ cluster actor (remote)
using hello_atom = caf::atom_constant<caf::atom("hello")>;      // (name, address, router, peers)
using digest_atom = caf::atom_constant<caf::atom("digest")>;    // (vector<uint64>): my digest
using entries_atom = caf::atom_constant<caf::atom("entries")>;  // (vector<entry>, bool sync_reply) -> ack: repairs
using ack_atom = caf::atom_constant<caf::atom("ack")>;
using delta_atom = caf::atom_constant<caf::atom("delta")>;      // (vector<entry>): local writes, pushed at once

// The router's messages to and from the cluster actor (put, erase, members)
// and to other replicas' routers (decide) are in actors/protocol.hpp.

// self-addressed
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using dial_atom = caf::atom_constant<caf::atom("dial")>;
using ae_atom = caf::atom_constant<caf::atom("ae")>;  // periodic anti-entropy
using ready_atom = caf::atom_constant<caf::atom("ready")>;
using address_atom = caf::atom_constant<caf::atom("address")>;  // (string): where peers reach us
using resolved_atom = caf::atom_constant<caf::atom("resolved")>;  // (vector<string>): seed addresses found

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
