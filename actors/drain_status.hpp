#pragma once
// When a drained backend may be stopped. A drain stops new sessions; the
// server is safe to stop once no operation runs on it and no session bound to
// it was used within the idle window, on any replica. Each replica counts its
// own calls, operations and sessions (activity) and, while the backend is
// drained, publishes that count through the replicated table ("a/NODE", newline, "BACKEND");
// every replica then adds up its own count and its peers' reports (decide).
// Pure: no clock, no network; tested in tests/unit/drain_status_test.cpp.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace scg::actors {

/// What holds one backend on one replica.
struct activity {
  std::size_t live_operations = 0;  ///< executions running or waiting for a reattach
  std::size_t active_sessions = 0;  ///< bound sessions used within the idle window
  std::size_t calls_in_flight = 0;  ///< calls being forwarded to it now
  std::int64_t last_activity_wall_ms = 0;  ///< newest use of the backend (wall ms); 0 none seen
  bool operator==(const activity& o) const {
    return live_operations == o.live_operations && active_sessions == o.active_sessions &&
           calls_in_flight == o.calls_in_flight && last_activity_wall_ms == o.last_activity_wall_ms;
  }
  bool quiet() const { return live_operations == 0 && active_sessions == 0 && calls_in_flight == 0; }
};

/// The replicated form of an activity, written by replica `node` at `written_wall_ms`.
std::string encode_activity(const activity& a);
/// nullopt when `text` is not what encode_activity writes.
std::optional<activity> decode_activity(const std::string& text);

/// The replicated key of replica `node`'s report on `backend`.
std::string activity_key(const std::string& node, const std::string& backend);
/// The node and backend of an activity key's id (after "a/"); nullopt when malformed.
std::optional<std::pair<std::string, std::string>> parse_activity_id(const std::string& id);

/// A peer replica's last report on a backend.
struct peer_report {
  std::string node;
  bool up = true;                   ///< the peer is connected now
  std::optional<activity> report;   ///< nullopt: it has not reported on this backend
  std::int64_t written_wall_ms = 0; ///< when it wrote the report
};

/// How often a replica republishes an unchanged report while the backend is
/// drained, and how old an up peer's report may grow before it counts as missing.
inline constexpr std::int64_t activity_refresh_ms = 5000;
inline constexpr std::int64_t activity_stale_ms = 3 * activity_refresh_ms;

enum class drain_state { serving, draining, idle };
const char* to_string(drain_state s);

/// What GET /api/v1/backends shows under "drain".
struct drain_status {
  drain_state state = drain_state::serving;
  activity total;  ///< this replica's and every up peer's, added (newest activity: the newest)
  /// Up peers whose report is missing or older than activity_stale_ms: the
  /// backend is not idle until they report.
  std::vector<std::string> waiting_for;
};

/// The status of a backend: serving when not `draining`; idle when drained
/// and neither this replica (`local`) nor any up peer holds it; draining
/// otherwise. Down peers are left out (their clients reach other replicas,
/// whose reports count).
drain_status decide(bool draining, const activity& local, const std::vector<peer_report>& peers,
                    std::int64_t now_wall_ms);

/// One line naming what holds a backend ("3 live operations, 2 active
/// sessions, waiting for scg-1"); "nothing" when idle.
std::string holders(const drain_status& s);

}  // namespace scg::actors
