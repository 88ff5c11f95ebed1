#pragma once
// Backend discovery from Kubernetes: the ready endpoints of one Service, read
// from its EndpointSlices through the API server (LIST, then WATCH resumed
// from the last resourceVersion) with the pod's service account. The pure
// parts (which endpoints are backends, how watch events change the slices)
// are free of I/O; k8s_watcher is the thread that talks to the API server.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/backend_set.hpp"

namespace httplib {
class Client;
}

namespace scg::discovery {

/// The `backend_discovery: { type: k8s, ... }` block.
/// `backend_discovery: { type: k8s, … }` (config/config.hpp).
using k8s_discovery_config = config::k8s_discovery;

/// The API server URL `cfg` names, or the in-cluster one from the
/// environment; empty when neither is there.
std::string api_server_url(const k8s_discovery_config& cfg);

/// The backends of `slices`: an EndpointSliceList (`{"items": [...]}`), an
/// array of EndpointSlices, or an object of EndpointSlices by name. An
/// endpoint counts when `conditions.ready` is true or absent and it is not
/// `conditions.terminating`; its first address is used (addresses of one
/// endpoint are fungible). One backend per distinct address, sorted:
/// name "SERVICE@IP:PORT", address "IP:PORT" or "[IP6]:PORT", ui_url with
/// {host} filled in. Malformed parts are skipped, never fatal.
std::vector<actors::backend_spec> ready_backends(const nlohmann::json& slices,
                                                 const k8s_discovery_config& cfg);

/// What one watch event did.
enum class event_effect {
  applied,   ///< ADDED / MODIFIED / DELETED: the slices changed (maybe not their ready set)
  bookmark,  ///< BOOKMARK: only the resourceVersion moved
  expired,   ///< ERROR 410 (Gone / Expired): the resourceVersion is too old; LIST again
  error,     ///< another ERROR: the watch is over; resume it
  ignored,   ///< not an event scg understands; nothing changed
};

/// The EndpointSlices of the Service as the API server last described them,
/// and the resourceVersion to resume a watch from. Pure: no I/O.
class endpoint_slice_state {
 public:
  /// Replaces everything with a LIST answer (an EndpointSliceList); false,
  /// and nothing changed, when it is not one.
  bool reset(const nlohmann::json& list);

  /// Applies one watch event (`{"type": ..., "object": ...}`), keyed by
  /// the object's metadata.name; remembers its resourceVersion.
  event_effect apply(const nlohmann::json& event);

  /// The latest resourceVersion seen (list or event); empty before a LIST.
  const std::string& resource_version() const { return resource_version_; }

  /// The slices by name (a JSON object).
  const nlohmann::json& slices() const { return slices_; }

  std::vector<actors::backend_spec> ready(const k8s_discovery_config& cfg) const {
    return ready_backends(slices_, cfg);
  }

 private:
  nlohmann::json slices_ = nlohmann::json::object();
  std::string resource_version_;
};

/// Follows the ready backends of one Service. A background thread LISTs the
/// EndpointSlices, then WATCHes them; a dropped watch is resumed from the
/// last resourceVersion after a backoff (100 ms doubling to 5 s), a 410 Gone
/// LISTs again. The bearer token is re-read from token_file on every
/// (re)connect; https is verified against ca_file. While the API server
/// cannot be reached the last set stands: nothing is reported.
class k8s_watcher {
 public:
  /// Called from the watcher thread with the whole ready set: after the
  /// first LIST, then whenever the set changes. Must not block for long.
  using callback = std::function<void(std::vector<actors::backend_spec>)>;

  /// Counters since start (for metrics and tests).
  struct counters {
    std::uint64_t lists = 0;    ///< successful LISTs
    std::uint64_t watches = 0;  ///< WATCH requests started
    std::uint64_t events = 0;   ///< watch events applied (bookmarks included)
    std::uint64_t errors = 0;   ///< failed requests and dropped watches
    std::uint64_t updates = 0;  ///< callbacks made
  };

  /// Starts the thread.
  k8s_watcher(k8s_discovery_config cfg, callback on_change);
  /// Stops the thread: interrupts the request in flight and joins (bounded
  /// by the connect timeout in the worst case).
  ~k8s_watcher();
  k8s_watcher(const k8s_watcher&) = delete;
  k8s_watcher& operator=(const k8s_watcher&) = delete;

  counters stats() const;

 private:
  enum class watch_end { dropped, expired, stopped };
  void run();
  bool list();
  /// One watch from the current resourceVersion; `progressed` when an event came.
  watch_end watch(bool& progressed);
  std::string list_path() const;
  /// A client for the API server, registered so that stop can interrupt it.
  std::unique_ptr<httplib::Client> client(int read_timeout_secs);
  void release(std::unique_ptr<httplib::Client>& c);
  /// Waits `ms` or until stopped; false when stopped.
  bool pause(int ms);
  bool stopping() const;
  /// Reports the ready set unless it is the one reported last.
  void deliver();
  /// Logs `event fields` at warn when it starts a streak of failures, at debug after.
  void failed(const std::string& event, const std::string& fields);
  void recovered();

  k8s_discovery_config cfg_;
  std::string origin_, base_path_;  ///< the API server split into "scheme://host:port" and a path prefix
  callback on_change_;
  endpoint_slice_state state_;
  std::optional<std::vector<actors::backend_spec>> delivered_;
  int failures_in_a_row_ = 0;

  mutable std::mutex mutex_;  // guards active_ and counters_; stopping_ is set under it
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  httplib::Client* active_ = nullptr;
  counters counters_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace scg::discovery
