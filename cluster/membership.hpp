#pragma once
// Who is in the cluster, as one replica sees it: the members (by node name)
// and the addresses it dials (with backoff). Pure bookkeeping, no actors:
// `Link` is how a member is reached (the cluster actor's handle in
// cluster_actor.cpp, a plain value in tests/unit/membership_test.cpp); it
// compares with == and tells its node with node().

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster_view.hpp"
#include "cluster/protocol_version.hpp"
#include "core/address.hpp"

namespace scg::cluster {

template <class Link, class Router>
class membership {
 public:
  struct member {
    std::string address;
    Link link;
    Router router;  ///< as the peer sent it
    bool up = false;
    std::int64_t last_seen_ms = 0;  ///< wall clock
    std::int64_t lag_ms = 0;
    peer_version version;  ///< as it announced it (legacy_peer() for protocol 1)
    /// Its first sync is over (it said so, or it never will: protocol 1),
    /// so it may own keys; reset each time it comes up.
    bool synced = false;
    std::int64_t greeted_ms = 0;  ///< wall clock: when greet_back or greet_stray last said yes
    std::int64_t up_since_ms = 0;  ///< wall clock: when it last came up
    /// It went down less than flap_ms after it came up (see dial_now).
    bool flapped = false;
  };

  /// What a hello means, for the caller to act on.
  enum class hello { ours, twin, twin_again, bad_address, claimed, refused, joined, known };

  /// A legacy hello (protocol 1's shape, no version in it): see below.
  hello on_hello(const Link& from, const Router& router, bool local, const std::string& name,
                 const std::string& address, const std::vector<std::string>& gossip, std::int64_t now_ms,
                 Link* replaced = nullptr, bool* warn = nullptr) {
    return on_hello(from, router, local, name, address, gossip, std::optional<peer_version>{}, now_ms, replaced, warn);
  }

  /// A hello from `from` (whose router is `router`): node `name`, reachable
  /// at `address`, knowing `gossip` addresses, announcing `announced` (a
  /// versioned hello) or nothing (a legacy hello: protocol 1, or the legacy
  /// hello a newer peer sends after its versioned one, which then decided).
  /// `local` says `from` is in this process (we dialed ourselves). The verdicts:
  ///   ours         our own hello: `address` is us, never dialed again;
  ///   twin         another replica uses our name (warn, greet it once);
  ///   twin_again   the same, already warned;
  ///   bad_address  `address` is no host:port: refused;
  ///   claimed      a second process claims a live member's name from
  ///                another address: the one seen first stays (`*warn`
  ///                set the first time);
  ///   refused      the peer speaks no protocol this replica speaks
  ///                (common_protocol is 0): no member; `*warn` set the first
  ///                time this name announces these versions;
  ///   joined       a new member, or one back up (watch it, greet, sync);
  ///                `*replaced` is the link it had before, if another;
  ///   known        an up member's hello again (seen now).
  hello on_hello(const Link& from, const Router& router, bool local, const std::string& name,
                 const std::string& address, const std::vector<std::string>& gossip,
                 const std::optional<peer_version>& announced, std::int64_t now_ms, Link* replaced = nullptr,
                 bool* warn = nullptr) {
    if (name == node_name_) {
      if (local) {
        self_addresses_.insert(address);
        return hello::ours;
      }
      return warned_.insert(address).second ? hello::twin : hello::twin_again;
    }
    if (!core::parse_host_port(address)) return hello::bad_address;
    auto found = members_.find(name);
    const bool echo = !announced && found != members_.end() && found->second.up && found->second.link == from;
    if (!echo) {
      auto r = refused_.find(name);
      if (!announced && r != refused_.end() && r->second.link == from) {  // its legacy echo
        if (warn) *warn = false;
        return hello::refused;
      }
      const peer_version v = announced.value_or(legacy_peer());
      if (common_protocol(self_, v) == 0) {
        const bool fresh = r == refused_.end() || !(r->second.version == v);
        refused_[name] = {from, v};
        // Dialed again only after a while: it stays refused until upgraded.
        if (auto t = targets_.find(address); t != targets_.end()) t->second.next_attempt_ms = now_ms + refused_redial_ms;
        if (warn) *warn = fresh;
        return hello::refused;
      }
    }
    auto& m = members_[name];
    // Another process under a live member's name is refused, unless it
    // greets from the member's own address: no two live processes hold one
    // address, so that is the member itself, back on a link CAF made anew
    // (a thawed replica's peers redialed it) or restarted before its old
    // link was seen down. Its new link replaces the old one.
    if (m.up && m.link && !(m.link == from) && m.link.node() != from.node() && m.address != address) {
      if (warn) *warn = warned_.insert(address).second;
      return hello::claimed;
    }
    const bool was_up = m.up && m.link == from;
    if (!was_up) {
      if (replaced && m.link && !(m.link == from)) *replaced = m.link;
      m.link = from;
      m.router = router;
      m.address = address;
      m.up = true;
      m.version = announced.value_or(legacy_peer());
      m.synced = !announces_synced(m.version);
      m.up_since_ms = now_ms;
      m.flapped = false;
      refused_.erase(name);
    }
    m.last_seen_ms = now_ms;
    targets_[address].connected = true;
    targets_[address].open_since_ms = 0;
    for (const auto& a : gossip)
      if (core::parse_host_port(a) && !targets_.count(a)) targets_[a];  // dialed on the next round
    return was_up ? hello::known : hello::joined;
  }

  /// Whether a `known` hello from member `name` is answered with a greeting:
  /// at most once per greet_back_ms. An up member greets again when it dialed
  /// this replica after seeing it down while this side saw no break (after a
  /// thaw, CAF can deliver a stale down of the old link after the new link's
  /// hello); only a greeting back brings this replica up there. The limit
  /// ends the exchange: two replicas that both see each other up trade at
  /// most one greeting each.
  bool greet_back(const std::string& name, std::int64_t now_ms) {
    auto found = members_.find(name);
    if (found == members_.end() || now_ms - found->second.greeted_ms < greet_back_ms) return false;
    found->second.greeted_ms = now_ms;
    return true;
  }

  /// Whether to greet the member on `link`, which sent what only a peer
  /// counting this replica up sends (a digest, a delta), while this replica
  /// counts it down: a one-way split, whatever stale down or lost greeting
  /// made it. The greeting is `known` there and answered (greet_back), which
  /// brings the member up here. At most once per greet_back_ms; never for a
  /// link no member has (a peer's hello comes first). The member's name, or
  /// empty for no greeting.
  template <class L>
  std::string greet_stray(const L& link, std::int64_t now_ms) {
    for (auto& [name, m] : members_) {
      if (!(m.link == link)) continue;
      if (m.up || now_ms - m.greeted_ms < greet_back_ms) return {};
      m.greeted_ms = now_ms;
      return name;
    }
    return {};
  }

  /// The link `link` (anything a Link compares with) went down at `now_ms`:
  /// its member is down and its address is dialed again. The names that
  /// went down.
  template <class L>
  std::vector<std::string> on_down(const L& link, std::int64_t now_ms) {
    std::vector<std::string> down;
    for (auto& [name, m] : members_) {
      if (!(m.link == link) || !m.up) continue;
      m.up = false;
      m.flapped = now_ms - m.up_since_ms < flap_ms;
      down.push_back(name);
      if (auto t = targets_.find(m.address); t != targets_.end()) {
        t->second.connected = false;
        t->second.open_since_ms = 0;
      }
    }
    return down;
  }

  /// The up member on `link` said its first sync is over; true when that
  /// is news.
  template <class L>
  bool on_synced(const L& link) {
    for (auto& [name, m] : members_)
      if (m.link == link && m.up && !m.synced) return m.synced = true;
    return false;
  }

  /// The protocol this replica and the member on `link` speak with each
  /// other (common_protocol); 0 when no member has that link.
  template <class L>
  std::uint32_t protocol_with(const L& link) const {
    for (const auto& [name, m] : members_)
      if (m.link == link) return common_protocol(self_, m.version);
    return 0;
  }

  /// A batch from `link` arrived: its member was seen now, its lag is `lag_ms`
  /// (when the batch carried entries).
  template <class L>
  void on_batch(const L& link, std::int64_t now_ms, bool had_entries, std::int64_t lag_ms) {
    for (auto& [name, m] : members_) {
      if (!(m.link == link)) continue;
      m.last_seen_ms = now_ms;
      if (had_entries) m.lag_ms = lag_ms;
    }
  }

  /// Forgets members down for `after_ms` (a scaled-down pod), and their
  /// addresses (seed names are resolved again, so one that returns is found).
  /// The members forgotten, by name; never any when `after_ms` <= 0.
  std::vector<std::pair<std::string, member>> forget_departed(std::int64_t now_ms, std::int64_t after_ms) {
    std::vector<std::pair<std::string, member>> gone;
    if (after_ms <= 0) return gone;
    for (auto it = members_.begin(); it != members_.end();) {
      if (it->second.up || now_ms - it->second.last_seen_ms < after_ms) {
        ++it;
        continue;
      }
      targets_.erase(it->second.address);
      gone.emplace_back(it->first, std::move(it->second));
      it = members_.erase(it);
    }
    return gone;
  }

  // --- dialing ----------------------------------------------------------------

  /// Adds an address to dial (a seed, or what a seed name resolved to).
  void add_target(const std::string& address) { targets_[address]; }
  /// Records that `address` turned out to be this replica.
  void add_self_address(const std::string& address) { self_addresses_.insert(address); }

  /// The addresses to dial now: not connected, no attempt in flight, not
  /// us, past their backoff. Each is marked in flight. A member seen down is
  /// dialed again by the one of the two whose name sorts first; the other
  /// waits for its greeting, and dials too only once the member has been
  /// silent for redial_fallback_ms (the first cannot reach it, or counts it
  /// up). Both sides dialing at once (after a thaw or a heal) gives CAF two
  /// connections between the same nodes, and a one-way split followed
  /// (docs/cluster.md, Known problems). Unless the member flapped (its link
  /// dropped right after its greeting came): then the first side's dials
  /// are answered by CAF from a cached link that is dead on this side, until
  /// its connection timeout, and only this side's dial mends it at once.
  /// The same holds back a member whose port this side's reachability
  /// probe has found open for held_open_ms without its greeting coming:
  /// the first side's dial was answered by CAF from a connection that is
  /// dead on its side (heals that took ~1.25 s, the connection time-out and
  /// a heartbeat, in the nemesis's partition runs), and this side's dial
  /// gives CAF a live connection to switch to.
  std::vector<std::string> dial_now(std::int64_t now_ms) {
    const auto held = held_addresses(now_ms);
    std::vector<std::string> out;
    for (auto& [address, t] : targets_) {
      if (t.connected || t.in_flight || self_addresses_.count(address) || now_ms < t.next_attempt_ms) continue;
      if (!core::parse_host_port(address) || held.count(address)) continue;
      t.in_flight = true;
      out.push_back(address);
    }
    return out;
  }
  /// The addresses dial_now holds back at `now_ms`: members seen down that
  /// wait for the other side's dial. The caller probes them and reports
  /// what it finds (held_port_open, held_port_shut).
  std::set<std::string> held_addresses(std::int64_t now_ms) const {
    std::set<std::string> held;
    for (const auto& [name, m] : members_) {
      if (m.up || m.flapped || !(node_name_ > name) || now_ms - m.last_seen_ms >= redial_fallback_ms) continue;
      if (!open_without_greeting(m.address, now_ms)) held.insert(m.address);
    }
    return held;
  }
  /// Whether a probe found `address`'s port open held_open_ms or more
  /// before `now_ms` and no greeting came since (see dial_now).
  bool open_without_greeting(const std::string& address, std::int64_t now_ms) const {
    auto t = targets_.find(address);
    return t != targets_.end() && t->second.open_since_ms > 0 && now_ms - t->second.open_since_ms >= held_open_ms;
  }
  /// A probe found held `address`'s port open at `now_ms` (the first time
  /// counts).
  void held_port_open(const std::string& address, std::int64_t now_ms) {
    auto& t = targets_[address];
    if (t.open_since_ms == 0) t.open_since_ms = now_ms;
  }
  /// A probe found held `address`'s port shut or unreachable: the count starts over.
  void held_port_shut(const std::string& address) { targets_[address].open_since_ms = 0; }

  /// A dial of `address` connected: its backoff starts over.
  void dial_succeeded(const std::string& address) {
    auto& t = targets_[address];
    t.in_flight = false;
    t.backoff_ms = first_backoff_ms;
  }
  /// A dial of `address` failed: tried again after a doubling backoff.
  void dial_failed(const std::string& address, std::int64_t now_ms) {
    auto& t = targets_[address];
    t.in_flight = false;
    t.next_attempt_ms = now_ms + t.backoff_ms;
    t.backoff_ms = std::min(t.backoff_ms * 2, max_backoff_ms);
  }
  /// A dial of `address` connected to nothing usable: tried on the next round.
  void dial_dropped(const std::string& address) { targets_[address].in_flight = false; }

  // --- reading ----------------------------------------------------------------

  const std::map<std::string, member>& members() const { return members_; }
  /// Whether some member is up and synced: it holds the cluster's table, so a
  /// sync from it to this replica may still be on the way.
  bool synced_member_up() const {
    return std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m.second.up && m.second.synced; });
  }
  /// The addresses of every member, up or down (what a hello gossips).
  std::vector<std::string> known_addresses() const {
    std::vector<std::string> out;
    for (const auto& [name, m] : members_) out.push_back(m.address);
    return out;
  }
  /// The admin view's rows: this replica first (an owner once `self_synced`),
  /// then every member.
  std::vector<member_info> view(const std::string& self_address, std::int64_t now_ms, bool self_synced) const {
    std::vector<member_info> out{
        {node_name_, self_address, "self", now_ms, 0, self_.protocol, self_.scg_version, self_synced}};
    for (const auto& [name, m] : members_)
      out.push_back({name, m.address, m.up ? "up" : "down", m.last_seen_ms, m.lag_ms, m.version.protocol,
                     m.version.scg_version, m.up && m.synced});
    return out;
  }

  /// This replica is `node_name` and speaks what `self` announces.
  explicit membership(std::string node_name, peer_version self = this_build())
      : node_name_(std::move(node_name)), self_(std::move(self)) {}
  const peer_version& self() const { return self_; }

  static constexpr std::int64_t first_backoff_ms = 250;
  static constexpr std::int64_t greet_back_ms = 1000;
  /// How long a member seen down waits for the peer whose name sorts first
  /// to dial it before this replica dials too (dial_now).
  static constexpr std::int64_t redial_fallback_ms = 5000;
  /// A member down this soon after it came up flapped (dial_now).
  static constexpr std::int64_t flap_ms = 1000;
  /// How long a held member's port may be open without its greeting before
  /// this side dials too (dial_now): the first side's dial round (250 ms)
  /// and its connection, with room for a loaded host.
  static constexpr std::int64_t held_open_ms = 400;
  static constexpr std::int64_t max_backoff_ms = 1000;  // a refusal costs a reachability probe only
  /// How long a refused peer's address waits before it is dialed again.
  static constexpr std::int64_t refused_redial_ms = 30000;

 private:
  struct target {
    bool connected = false;  ///< a hello came back through it
    bool in_flight = false;
    std::int64_t next_attempt_ms = 0;
    std::int64_t backoff_ms = first_backoff_ms;
    std::int64_t open_since_ms = 0;  ///< held: when a probe first found its port open (0: not yet)
  };

  struct refusal {
    Link link;
    peer_version version;
  };

  std::string node_name_;
  peer_version self_;
  std::map<std::string, refusal> refused_;       ///< by node name: the last link refused, what it announced
  std::map<std::string, member> members_;        ///< by node name, never self
  std::map<std::string, target> targets_;        ///< by "host:port"
  std::set<std::string> self_addresses_;         ///< addresses that turned out to be us
  std::set<std::string> warned_;                 ///< addresses warned of as using a taken name
};

}  // namespace scg::cluster
