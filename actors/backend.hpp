#pragma once
// What the data path and the admin API share about one backend. The backend
// actor owns its lifecycle and writes the atomics; the data-plane workers read
// them without an actor round trip, and scg's own calls to the backend (health
// probes, holder searches, interrupts) use its gRPC channel.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/drain_status.hpp"
#include "actors/session_table.hpp"

namespace grpc {
class Channel;
class ByteBuffer;
template <class RequestType, class ResponseType>
class TemplatedGenericStub;
typedef TemplatedGenericStub<ByteBuffer, ByteBuffer> GenericStub;
}  // namespace grpc

namespace scg::actors {

/// One Spark Connect server as this replica sees it.
struct backend_state {
  std::string name;
  std::string address;
  std::string ui_url;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;  ///< one HTTP/2 connection multiplexes all calls

  std::atomic<bool> reachable{true};   ///< false while the channel is in TRANSIENT_FAILURE
  std::atomic<bool> healthy{true};     ///< by active probes (health: failures / successes)
  /// Steady-clock ms since when it is unreachable or unhealthy; 0 while fine.
  std::atomic<std::int64_t> down_since_ms{0};
  /// EWMA of (active + pending) / slots from the Spark UI, in [0, 1]; negative
  /// until the first good poll (then placement scores on sessions alone).
  std::atomic<double> utilization{-1.0};
  std::atomic<std::uint64_t> polls_total{0};        ///< Spark UI polls made by this replica
  std::atomic<std::uint64_t> poll_errors_total{0};  ///< failed Spark UI polls
  std::atomic<bool> draining{false};   ///< no new sessions (POST /api/v1/backends/{name}/drain)
  /// No longer in the configured set (reload, DNS): no new sessions; its
  /// sessions carry on while it serves, and move when it is lost.
  std::atomic<bool> removed{false};
  std::atomic<std::int64_t> in_flight{0};        ///< calls being forwarded to it now
  std::atomic<std::uint64_t> calls_total{0};     ///< calls started to it
  std::atomic<std::uint64_t> unavailable_total{0};  ///< calls that failed to reach it
  /// Why the last Spark UI poll failed; empty after a good one.
  std::string poll_error() const {
    std::lock_guard lock{note_mu_};
    return poll_error_;
  }
  void set_poll_error(std::string why) {
    std::lock_guard lock{note_mu_};
    poll_error_ = std::move(why);
  }

  /// What peer replicas last reported of their activity on it while it is
  /// drained (replicated "a/" keys; actors/drain_status.hpp), by node.
  struct peer_activity {
    std::string node;
    activity report;
    std::int64_t written_wall_ms = 0;
  };
  std::vector<peer_activity> peer_reports() const {
    std::lock_guard lock{note_mu_};
    return peer_reports_;
  }
  /// Records `node`'s report, or forgets it (nullopt: retracted).
  void set_peer_report(const std::string& node, std::optional<activity> report, std::int64_t written_wall_ms) {
    std::lock_guard lock{note_mu_};
    auto it = std::find_if(peer_reports_.begin(), peer_reports_.end(),
                           [&](const peer_activity& p) { return p.node == node; });
    if (!report) {
      if (it != peer_reports_.end()) peer_reports_.erase(it);
    } else if (it == peer_reports_.end()) {
      peer_reports_.push_back({node, *report, written_wall_ms});
    } else {
      *it = {node, *report, written_wall_ms};
    }
  }

  backend_state(std::string n, std::string a, std::string u);
  ~backend_state();
  backend_state(const backend_state&) = delete;
  backend_state& operator=(const backend_state&) = delete;

 private:
  mutable std::mutex note_mu_;
  std::string poll_error_;
  std::vector<peer_activity> peer_reports_;
};

/// Every backend this replica has known since it started, shared by the
/// router, the forwarder, the admin API and the cluster actor (copies of a
/// backend_list are handles to one registry). Entries are appended and never
/// moved or dropped, so a binding's index stays valid and readers take no
/// lock; a backend taken out of the configured set is marked `removed`.
class backend_list {
 public:
  /// At most this many entries over the process's life; a reload that would
  /// pass it is refused (backend_set logs it).
  static constexpr std::size_t capacity = 4096;

  backend_list() : s_(std::make_shared<storage>()) {}

  std::size_t size() const { return s_->size.load(std::memory_order_acquire); }
  bool empty() const { return size() == 0; }
  bool full() const { return size() >= capacity; }
  const std::shared_ptr<backend_state>& operator[](std::size_t i) const { return s_->slots[i]; }
  const std::shared_ptr<backend_state>* begin() const { return s_->slots.data(); }
  const std::shared_ptr<backend_state>* end() const { return s_->slots.data() + size(); }

  /// Appends `b` (the slot is written before the size that publishes it);
  /// its index, or nullopt when the registry is full.
  std::optional<backend_index> push_back(std::shared_ptr<backend_state> b) {
    std::lock_guard<std::mutex> lock(s_->write);
    const auto n = s_->size.load(std::memory_order_relaxed);
    if (n >= capacity) return std::nullopt;
    s_->slots[n] = std::move(b);
    s_->size.store(n + 1, std::memory_order_release);
    return static_cast<backend_index>(n);
  }

 private:
  struct storage {
    std::array<std::shared_ptr<backend_state>, capacity> slots;
    std::atomic<std::size_t> size{0};
    std::mutex write;
  };
  std::shared_ptr<storage> s_;
};

/// The index of the backend named `name`, nullopt when none is. When a name
/// came back with a new address it has two entries: the newest is meant.
inline std::optional<backend_index> find_backend(const backend_list& backends, const std::string& name) {
  for (std::size_t i = backends.size(); i-- > 0;)
    if (backends[i]->name == name) return static_cast<backend_index>(i);
  return std::nullopt;
}

/// The backend's utilization EWMA, nullopt until its first good poll.
inline std::optional<double> polled_utilization(const backend_state& b) {
  auto u = b.utilization.load();
  return u >= 0 ? std::optional<double>(u) : std::nullopt;
}

/// True when `b` is down (unreachable or unhealthy) now. (down_since_ms
/// follows these flags at the backend actor's next tick.)
inline bool down(const backend_state& b) { return !b.reachable.load() || !b.healthy.load(); }

/// True when `b` is down and has been for `after_ms` by `now_ms`. A backend
/// back up is not lost, even before its down_since_ms is cleared: placement
/// may give it a new session at once.
inline bool lost(const backend_state& b, std::int64_t now_ms, std::int64_t after_ms) {
  auto since = b.down_since_ms.load();
  return since > 0 && down(b) && now_ms - since >= after_ms;
}

/// True when placement may give `b` new sessions.
inline bool eligible(const backend_state& b) {
  return b.reachable.load() && b.healthy.load() && !b.draining.load() && !b.removed.load();
}

/// Creates a backend with its channel: one HTTP/2 connection, message limits
/// from `max_message_bytes`, reconnect attempts bounded by `connect_timeout_ms`
/// so calls to a dead server fail fast with UNAVAILABLE.
std::shared_ptr<backend_state> make_backend(const std::string& name, const std::string& address,
                                            const std::string& ui_url,
                                            std::size_t max_message_bytes,
                                            int connect_timeout_ms);

}  // namespace scg::actors
