#pragma once
// Cluster protocol versions: which one this build speaks, which peers it can
// speak with. Pure, no actors (tests/unit/protocol_version_test.cpp); the
// rule for changing a message is in docs/cluster.md, "Protocol versions".

#include <algorithm>
#include <cstdint>
#include <string>

namespace scg::cluster {

/// The cluster protocol this build speaks. 1 is v0.1.0's, which carried no
/// version: a peer that sends only the legacy hello speaks 1. 2 added the
/// versioned hello and `synced`; 3 the fine digest (`digestf`); 4 repairs
/// with their entries packed in one byte string (`entriesp`).
inline constexpr std::uint32_t protocol_version = 4;
/// The oldest protocol this build still speaks: the previous release's.
inline constexpr std::uint32_t min_protocol_version = 1;

/// What a replica announces in its versioned hello: the protocols it speaks,
/// [min_protocol, protocol], and its scg version ("" when not announced).
struct peer_version {
  std::uint32_t protocol = 1;
  std::uint32_t min_protocol = 1;
  std::string scg_version;
  bool operator==(const peer_version& o) const {
    return protocol == o.protocol && min_protocol == o.min_protocol && scg_version == o.scg_version;
  }
};

/// A peer that sent only the legacy hello: protocol 1, version unknown.
inline peer_version legacy_peer() { return {1, 1, ""}; }

/// This build, as it announces itself.
inline peer_version this_build() { return {protocol_version, min_protocol_version, SCG_VERSION}; }

/// What a replica announces: this build, or protocol `only` alone when it
/// is 1 to 999 (the hidden, test-only --test-cluster-protocol flag: a test
/// starts a peer this build cannot speak with, or one of an older protocol,
/// tests/integration/upgrade_test.cpp); no setting and no contract.
inline peer_version announced_version(std::uint32_t only) {
  auto v = this_build();
  if (only > 0 && only < 1000) v.protocol = v.min_protocol = only;
  return v;
}

/// The protocol `ours` and `theirs` speak with each other: the newest both
/// speak, 0 when their ranges do not meet (or either range is empty): refuse.
inline std::uint32_t common_protocol(const peer_version& ours, const peer_version& theirs) {
  if (ours.min_protocol > ours.protocol || theirs.min_protocol > theirs.protocol) return 0;
  const auto low = std::max(ours.min_protocol, theirs.min_protocol);
  const auto high = std::min(ours.protocol, theirs.protocol);
  return low <= high ? high : 0;
}

/// Whether a replica announcing `ours` also sends the legacy hello: only
/// while it still speaks protocol 1, so a v0.1.0 peer (which cannot refuse
/// anyone) never takes a replica that cannot speak with it as a member.
inline bool sends_legacy_hello(const peer_version& ours) { return ours.min_protocol <= 1; }

/// Whether a peer announcing `theirs` tells its peers when its first sync is
/// over (the `synced` message, protocol 2): until then it owns no key. A
/// protocol-1 peer never says so, and owns its keys from the moment it is up.
inline bool announces_synced(const peer_version& theirs) { return theirs.protocol >= 2; }

/// Whether two replicas speaking protocol `common` with each other exchange
/// the fine digest (4096 sub-buckets, `digestf`) rather than the 64-bucket one.
inline bool exchanges_fine_digest(std::uint32_t common) { return common >= 3; }

/// Whether repairs between two replicas speaking protocol `common` carry
/// their entries packed (`entriesp`, cluster/packed_entries.hpp) rather than
/// as a vector of entries (`entries`).
inline bool sends_packed_repairs(std::uint32_t common) { return common >= 4; }

}  // namespace scg::cluster
