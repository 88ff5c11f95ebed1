#pragma once
// The replica's configuration: YAML in, a validated plain struct out.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"
#include "config/security.hpp"
#include "core/log_format.hpp"

namespace scg::config {

/// A value of an enumeration as the YAML file spells it. An enumeration's
/// names list each of its values once, in the order errors list them.
template <class E>
using named = std::pair<std::string_view, E>;

/// The value `name` stands for in `names`; nullopt for none.
template <class E, std::size_t N>
constexpr std::optional<E> from_name(const named<E> (&names)[N], std::string_view name) {
  for (const auto& n : names)
    if (n.first == name) return n.second;
  return std::nullopt;
}

/// The name of `value` in `names`.
template <class E, std::size_t N>
constexpr std::string_view name_of(const named<E> (&names)[N], E value) {
  for (const auto& n : names)
    if (n.second == value) return n.first;
  return "?";
}

/// One Spark Connect server. `name` defaults to the address.
struct backend {
  std::string name;
  std::string address;  ///< "host:port"
  std::string ui_url;   ///< Spark UI base URL, empty when not configured; "{host}" stands for the resolved address
  /// true (`resolve: all`): every address the host resolves to is a backend
  /// of its own, named "NAME@IP:PORT", and the name is re-resolved every
  /// backend_refresh_secs (a headless Service). false: one backend, one channel.
  bool resolve_all = false;
};

/// `placement.strategy`.
enum class placement_strategy {
  least_loaded,  ///< the eligible backend with the lowest score
  round_robin,   ///< the next eligible backend in turn
};
inline constexpr named<placement_strategy> placement_strategy_names[] = {
    {"least_loaded", placement_strategy::least_loaded},
    {"round_robin", placement_strategy::round_robin},
};

/// How new sessions are placed (the score terms are used from the placement issue on).
struct placement {
  placement_strategy strategy = placement_strategy::least_loaded;
  int poll_interval_ms = 2000;
  double ewma_alpha = 0.3;
  double utilization_weight = 0.9;
  double session_weight = 0.1;
  int session_cap = 50;
  /// Shedding: when every eligible backend's score is above this, new
  /// sessions are refused (RESOURCE_EXHAUSTED with a retry delay). Absent: off.
  std::optional<double> shed_above;
};

/// How long bindings live without traffic.
struct affinity {
  int session_ttl_secs = 3600;  ///< idle session bindings expire after this
  int op_ttl_secs = 600;        ///< operation index entries expire after this
};

/// Bounds of the forwarding path.
/// A tenant's bulkhead: what it may hold at once; 0 is no limit.
struct bulkhead {
  int max_sessions = 0;        ///< live sessions, cluster-wide
  int max_executions = 0;      ///< concurrent ExecutePlan/ReattachExecute streams, cluster-wide
  int max_execution_secs = 0;  ///< longest an execution stream may run before scg interrupts it
};

struct limits {
  std::size_t max_message_bytes = 256u << 20;  ///< both directions, both sides
  int connect_timeout_ms = 3000;  ///< a backend that cannot be reached answers UNAVAILABLE after this
  /// The status of "retry later" refusals (rate limits, bulkheads, shedding):
  /// false: RESOURCE_EXHAUSTED with RetryInfo (PySpark 4.1+ waits and retries;
  /// 4.0 and spark-connect-go give up); true: UNAVAILABLE with RetryInfo
  /// (every client retries, on its own backoff). docs/compatibility.md.
  bool retry_unavailable = false;
  // --- the data plane's own bounds (docs/hardening.md)
  /// Call data scg may hold at once (queued toward slow readers or writers,
  /// messages it reads whole), all workers together; past it the calls
  /// holding the most are ended RESOURCE_EXHAUSTED.
  int buffer_mib = 512;
  /// Client connections at once; 0: derived from the open-file limit.
  int max_client_connections = 0;
  int handshake_timeout_secs = 10;  ///< accept to HTTP/2 preface (and the TLS handshake before it)
  int idle_connection_secs = 300;   ///< a client connection without streams this long: GOAWAY, close; 0: never
  int first_message_secs = 30;      ///< a request stream's first message, from its headers; 0: no limit
  /// The scheduling slice asked of Linux (6.12+) for scg's threads, so that
  /// one woken with work preempts a busy core's task; 0: the kernel's default
  /// (core/sched_slice.hpp).
  int sched_slice_us = 100;
  bulkhead per_tenant;                                    ///< every tenant's, unless overridden
  std::map<std::string, bulkhead, std::less<>> tenants;  ///< per tenant: replaces per_tenant
  const bulkhead& for_tenant(std::string_view tenant) const {
    auto it = tenants.find(tenant);
    return it == tenants.end() ? per_tenant : it->second;
  }
};

/// Active health probes: a cheap Spark Connect RPC (Config on a fixed probe
/// session) to every backend, since Spark registers no grpc.health service.
struct health {
  int interval_ms = 1000;  ///< between probes of one backend
  int timeout_ms = 1000;   ///< a probe with no answer by then failed
  int failures = 3;        ///< consecutive failures that make a backend unhealthy
  int successes = 2;       ///< consecutive successes that make it healthy again
};

/// `on_backend_lost.action`: what a call of a lost backend's session gets.
/// Another action is its enumerator and its row in lost_action_names; the
/// parser and its error message take it from there.
enum class lost_action {
  rebind,  ///< the session is placed anew (its Spark state stayed on the lost server)
  fail,    ///< the call fails, naming the lost backend; the client starts a new session
  replay,  ///< the session is opened on a new server and its journal replayed (docs/replay.md)
};
inline constexpr named<lost_action> lost_action_names[] = {
    {"rebind", lost_action::rebind},
    {"fail", lost_action::fail},
    {"replay", lost_action::replay},
};

/// What happens to the sessions of a backend that stays unreachable or
/// unhealthy: a decision instead of minutes of client retries.
struct on_backend_lost {
  int after_secs = 30;                       ///< down this long counts as lost
  lost_action action = lost_action::rebind;
  int max_journal_kib = 1024;        ///< replay: one session's journal; past it the session is unreplayable
  int max_journal_total_mib = 256;   ///< replay: every journal this replica holds
  std::string spool_dir;             ///< replay: where artifacts are spooled ("": $TMPDIR or /tmp)
  int max_artifacts_mib = 256;       ///< replay: one session's spooled artifacts; past it, unreplayable
  int max_spool_mib = 2048;          ///< replay: every spooled artifact of this replica, on disk
  /// `tenants: { TENANT: ACTION }`: the action for that tenant's sessions, in place of `action`.
  std::map<std::string, lost_action, std::less<>> tenants;
  /// The action for `tenant`'s sessions.
  lost_action action_for(std::string_view tenant) const {
    auto it = tenants.find(tenant);
    return it == tenants.end() ? action : it->second;
  }
  /// Whether any tenant's sessions are replayed (journals are kept).
  bool any_replay() const {
    if (action == lost_action::replay) return true;
    for (const auto& [t, a] : tenants)
      if (a == lost_action::replay) return true;
    return false;
  }
};

/// HTTP/2 PING on connections that have gone quiet, both sides: a peer that
/// stops answering (a host gone without a reset, a stopped process) has
/// its connection closed, and the calls on it fail with UNAVAILABLE.
struct keepalive {
  int interval_secs = 10;  ///< quiet this long: PING; 0: no keepalive
  int timeout_secs = 8;    ///< no answer by then: the connection is closed
};

struct shutdown {
  int deadline_secs = 30;  ///< in-flight streams may finish for this long after SIGTERM
};

/// Draining a backend before its server is replaced (docs/runbook.md).
struct drain {
  /// A session bound to a drained backend holds it while it was used within
  /// this long; quieter sessions do not (their Spark state goes with the server).
  int idle_secs = 60;
};

/// Following the configuration file without a SIGHUP (a Kubernetes ConfigMap
/// mounted as a directory is updated by swapping a symlink).
struct reload {
  int watch_secs = 10;  ///< look at the file this often; 0: only SIGHUP reloads
};

/// `logging.level`: the least severe lines logged.
enum class log_level { trace, debug, info, warn, error, off };
inline constexpr named<log_level> log_level_names[] = {
    {"trace", log_level::trace}, {"debug", log_level::debug}, {"info", log_level::info},
    {"warn", log_level::warn},   {"error", log_level::error}, {"off", log_level::off},
};

/// `logging.format` (core/log_format.hpp).
inline constexpr named<core::log_format> log_format_names[] = {
    {"json", core::log_format::json},
    {"text", core::log_format::text},
};

struct logging {
  log_level level = log_level::info;
  core::log_format format = core::log_format::json;
};

/// Mutual TLS on cluster links: every replica presents its certificate and
/// accepts only peers whose certificate the CA signed.
struct cluster_tls {
  std::string cert_file;  ///< PEM certificate (chain) of this replica
  std::string key_file;   ///< PEM private key
  std::string ca_file;    ///< PEM CA that signs every replica's certificate
};

/// The `tracing:` block: W3C trace context and spans exported by OTLP/HTTP
/// (JSON); absent: no spans, and the client's traceparent passes untouched.
struct tracing {
  std::string otlp_endpoint;     ///< full URL of the collector's traces endpoint (http:// or https://)
  std::string service_name = "scg";
  int queue_capacity = 2048;     ///< finished spans waiting for export; more are dropped
  int batch_size = 256;          ///< spans per export request
  int flush_interval_ms = 1000;  ///< a partial batch waits at most this long
  int timeout_ms = 2000;         ///< one export request (connect, send, answer)
};

/// The `accounting:` block: per-tenant and per-user usage (core/usage.hpp), bounded.
struct accounting {
  int max_tenants = 200;     ///< tenants kept by name; later ones count as tenant "_other"
  int max_users = 1000;      ///< (tenant, user) pairs kept for GET /api/v1/usage; later ones as user "_other"
  int prometheus_users = 0;  ///< /metrics shows scg_user_* for the N users with the most RPCs; 0: none
};

/// The `cluster:` block; absent means a single replica.
struct cluster {
  std::string node_name;
  std::string bind_addr = "0.0.0.0:7400";
  std::vector<std::string> seeds;  ///< host:port of peers; a name may resolve to several
  std::string identity = "scg-cluster";  ///< shared cluster identity; peers without it are refused
  int heartbeat_interval_ms = 250;        ///< link heartbeats (CAF has them off by default)
  int connection_timeout_ms = 1000;       ///< a peer silent this long is down
  int sync_wait_secs = 5;  ///< not ready before a full sync, or this long with no peer reachable
  int forget_after_secs = 600;  ///< a member down this long is dropped (0: never); seeds are still dialed
  /// After a member came or went (or this replica synced), an operation id
  /// nobody answers for is refused UNAVAILABLE for this long rather than
  /// routed by a session unknown here (it may live on a replica not heard yet).
  int settle_ms = 3000;
  std::optional<cluster_tls> tls;  ///< absent: plain TCP (keep the port on a private network)
  // Hidden, test-only: not read from YAML and not documented for users; set
  // by scg's hidden flags (app/main.cpp) so integration tests can make a
  // replica that holds its writes or speaks an older protocol. No contract.
  int test_flush_delay_ms = -1;   ///< --test-flush-delay-ms: local writes wait this long; negative: 5 ms
  int test_cluster_protocol = 0;  ///< --test-cluster-protocol: announce this protocol alone; 0: this build's
};

/// A whole replica configuration, validated.
/// TLS on the front door (`tls:`); absent: plaintext (h2c).
struct front_tls {
  std::string cert_file;       ///< PEM certificate chain of the server
  std::string key_file;        ///< PEM private key
  std::string client_ca_file;  ///< PEM CA; set: clients must present a certificate it signed (mutual TLS)
};

/// `backend_discovery: { type: k8s, … }`: the ready endpoints of a Service
/// become backends named SERVICE@IP:PORT, followed without restart.
struct k8s_discovery {
  std::string namespace_;     ///< the Service's namespace
  std::string service_name;   ///< its EndpointSlices carry kubernetes.io/service-name=NAME
  int port = 15002;           ///< Spark Connect port on every endpoint
  std::string ui_url;         ///< optional Spark UI base URL; "{host}" is replaced by the endpoint IP
  /// "https://host:port" (or http:// in tests); empty:
  /// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
  std::string api_server;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  /// The API server ends each watch after this long (timeoutSeconds) and the
  /// watcher resumes it; it also bounds how long a silent watch is trusted.
  int resync_secs = 300;
};

/// The `admin:` block: who may use the admin HTTP plane and the bounds that
/// keep its probes answering (docs/security.md, "The admin plane").
struct admin_plane {
  std::string token_file;       ///< admin role (drain, undrain; listings too); empty: none
  std::string read_token_file;  ///< read-only role (listings, status page); empty: none
  /// No token file set: true serves every endpoint to anyone who reaches the
  /// port (a laptop, a demo); false (default) refuses listings and changes.
  bool allow_unauthenticated = false;
  bool open_metrics = true;   ///< GET /metrics without a token (Prometheus); false: read role
  std::optional<std::string> probe_addr;  ///< a listener for /healthz and /readyz only; absent: none
  int max_connections = 512;     ///< per listener; more are closed at accept
  int idle_timeout_ms = 5000;    ///< a connection with no request (or between requests) this long is closed
  int request_timeout_ms = 5000; ///< a request's head and body must arrive within this, from its first byte
  int max_heavy_requests = 4;    ///< listings and metrics rendered at once; more get 503 and Retry-After
};

struct gateway {
  std::string bind_addr = "0.0.0.0:15003";
  /// Data-plane worker threads; 0: one per CPU this process may run on.
  int workers = 0;
  std::optional<std::string> admin_addr = "0.0.0.0:9090";  ///< nullopt: admin HTTP disabled
  admin_plane admin;
  std::vector<backend> backends;
  int backend_refresh_secs = 30;  ///< how often `resolve: all` backend names are re-resolved
  config::placement placement;
  config::affinity affinity;
  config::limits limits;
  config::health health;
  config::on_backend_lost on_backend_lost;
  config::keepalive keepalive;
  config::shutdown shutdown;
  config::drain drain;
  config::reload reload;
  config::logging logging;
  std::optional<config::cluster> cluster;
  std::optional<front_tls> tls;
  std::optional<config::tracing> tracing;  ///< absent: tracing off
  config::accounting accounting;
  std::optional<k8s_discovery> backend_discovery;  ///< absent: backends come from `backends` only
  security_config security;  ///< auth, tenants, backend_token, rate_limits
};

/// Parses and validates YAML text. Unknown keys, at any level, are errors.
result<gateway> parse(const std::string& yaml_text);

/// Reads FILE and parses it; a missing or unreadable file is an error naming it.
result<gateway> load(const std::string& path);

}  // namespace scg::config
