// The cluster actor's dialing: every dial_interval, each known address not
// linked yet is probed (reach_probe.hpp) and dialed once its port is open,
// with backoff for one that refused (membership.hpp decides which are due);
// the seed names are looked up again every few rounds on a thread of their
// own; what answers is greeted.
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>

#include "actors/backend_set.hpp"
#include "cluster/cluster_state.hpp"
#include "core/address.hpp"
#include "core/throttle.hpp"

namespace scg::cluster {

namespace {

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

/// Looks the seed names up on a thread of its own (a look-up may block for
/// seconds; the scheduler has two), and sends what they resolve to back.
void resolve_seeds(self_ptr self) {
  auto& st = self->state;
  st.resolving = true;
  self->spawn<caf::detached>(
      [seeds = st.cfg.seeds](caf::blocking_actor* resolver, const cluster_actor& cluster) {
        std::vector<std::string> addrs;
        for (const auto& seed : seeds) {
          const auto hp = core::parse_host_port(seed);  // the config validated it
          if (!hp) continue;
          for (const auto& ip : actors::resolve_host(hp->host)) addrs.push_back(core::host_port{ip, hp->port}.str());
        }
        resolver->send(cluster, resolved_atom::value, std::move(addrs));
      },
      cluster_actor{self});
}

}  // namespace

/// A dial round (every dial_interval). Seed names are re-resolved every few
/// rounds: a scaled-up StatefulSet's new pods appear under its headless
/// Service name.
void dial_round(self_ptr self) {
  auto& st = self->state;
  if (st.dial_rounds++ % resolve_every == 0 && !st.resolving && !st.cfg.seeds.empty()) resolve_seeds(self);
  dial_due(self);
  self->delayed_send(self, dial_interval, dial_atom::value);
}

/// The round's probes looked at again (watch_probes): one open is dialed.
void on_probe_poll(self_ptr self) {
  auto& st = self->state;
  st.probe_poll_scheduled = false;
  for (auto& [address, p] : st.probes)
    if (p.second == st.dial_rounds && p.first.poll() == reach_probe::state::open) return dial_due(self);
  watch_held(self, false);
  watch_probes(self);
}

/// What the seed names resolve to: dial targets, new ones dialed at once.
void on_resolved(self_ptr self, const std::vector<std::string>& addrs) {
  self->state.resolving = false;
  for (const auto& a : addrs) self->state.members.add_target(a);
  dial_due(self);
}

}  // namespace scg::cluster
