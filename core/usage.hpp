#pragma once
// Per-tenant and per-user accounting: what each tenant's (and user's) calls
// cost, for billing and for finding a heavy tenant. The forwarder records
// one call at its end (record_call), the router a new session when it
// decides one (record_session): never per frame. Readers are /metrics
// (totals per tenant, optionally the top users) and GET /api/v1/usage
// (figures over the last minutes, from a ring of per-minute buckets).
//
// Bounded: at most `max_tenants` tenants are kept by name, later ones count
// under tenant "_other"; at most `max_users` (tenant, user) pairs, later
// ones under user "_other" of their tenant. Each overflow is counted. A
// kept tenant or user costs about 4 KiB (60 buckets of 7 figures) and is
// never forgotten while the process runs (its counters stay monotonic).
// Pure and thread-safe. Each thread records into its own shard (a mutex
// only readers share with it), so data-plane workers never wait on each
// other; the bounds are kept across shards by a registry consulted only the
// first time a shard sees a name (and for every call of a tenant or user
// over the bound). Readers add the shards up.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/local_reply.hpp"
#include "core/rpc.hpp"

namespace scg::core {

/// The figures accounting adds up, per tenant or user.
struct usage_figures {
  std::uint64_t sessions = 0;      ///< new sessions placed
  std::uint64_t executions = 0;    ///< ExecutePlan calls that reached a backend
  std::uint64_t execution_ms = 0;  ///< time execution streams (ExecutePlan, ReattachExecute) were open
  std::uint64_t result_bytes = 0;  ///< ExecutePlanResponse message bytes streamed to clients
  std::uint64_t result_rows = 0;   ///< Σ arrow_batch.row_count of those responses
  std::uint64_t rpcs = 0;          ///< calls finished
  std::uint64_t rejections = 0;    ///< calls scg answered itself (local replies)
  std::uint64_t replays = 0;       ///< sessions replayed on a new server (on_backend_lost: replay)
  std::uint64_t replay_ms = 0;     ///< time those replays took
  usage_figures& operator+=(const usage_figures& o);
  bool operator==(const usage_figures& o) const;
};

/// What one call adds, at its end.
struct call_usage {
  rpc method = rpc::unknown;
  std::optional<local_reason> rejection;  ///< set when scg answered the call itself
  bool execution = false;                 ///< an ExecutePlan that reached a backend
  std::uint64_t execution_ms = 0;
  std::uint64_t result_bytes = 0;
  std::uint64_t result_rows = 0;
};

/// The accounting bounds (config `accounting:`).
struct usage_options {
  std::size_t max_tenants = 200;     ///< tenants kept by name; more count as "_other"
  std::size_t max_users = 1000;      ///< (tenant, user) pairs kept; more count as user "_other"
  std::size_t prometheus_users = 0;  ///< /metrics shows the N users with the most RPCs; 0: none
};

/// Minutes the per-minute ring covers (the longest window).
inline constexpr std::int64_t usage_window_minutes = 60;

class usage_ledger {
 public:
  static constexpr std::string_view other = "_other";  ///< the overflow name
  static constexpr std::string_view none = "_none";    ///< a call with no tenant (refused before or at authentication)

  explicit usage_ledger(usage_options o = {});

  /// Replaces the bounds; entries already kept stay.
  void configure(const usage_options& o);
  const usage_options& options() const { return options_; }

  /// One call of `user` of `tenant` ended at `now_ms` (wall ms). An empty
  /// tenant counts as "_none"; an empty user counts for the tenant only.
  void record_call(std::string_view tenant, std::string_view user, const call_usage& u, std::int64_t now_ms);
  /// A new session of `user` of `tenant` was placed.
  void record_session(std::string_view tenant, std::string_view user, std::int64_t now_ms);
  /// A session of `user` of `tenant` was replayed on a new server in `took_ms`.
  void record_replay(std::string_view tenant, std::string_view user, std::uint64_t took_ms, std::int64_t now_ms);

  /// A tenant's totals since start.
  struct tenant_totals {
    std::string tenant;
    usage_figures figures;
    std::array<std::uint64_t, rpc_count> rpcs{};                 ///< by rpc
    std::array<std::uint64_t, local_reason_count> rejections{};  ///< by local reply reason
  };
  /// Every tenant kept (and "_other", "_none" once used), sorted by name.
  std::vector<tenant_totals> totals() const;

  struct row {
    std::string tenant, user;  ///< user empty in rows by tenant
    usage_figures figures;
  };
  /// Figures over the last `minutes` (1..60, the current minute included)
  /// before `now_ms`, by tenant or by (tenant, user): rows with any figure,
  /// the `limit` largest by RPCs (ties by name); `total_rows` says how many matched.
  std::vector<row> window(bool by_user, std::int64_t minutes, std::int64_t now_ms, std::size_t limit,
                          std::size_t* total_rows = nullptr, std::string_view tenant_filter = {}) const;
  /// The `n` users with the most RPCs since start, with their totals.
  std::vector<row> top_users(std::size_t n) const;

  /// Calls and sessions counted under "_other" because a bound was reached.
  std::uint64_t tenant_overflows() const;
  std::uint64_t user_overflows() const;

 private:
  struct bucket {
    std::int64_t minute = -1;  // which minute it holds; another: stale
    usage_figures figures;
  };
  struct entry {
    usage_figures totals;
    std::array<bucket, usage_window_minutes> ring{};
    void add(const usage_figures& f, std::int64_t minute);
  };
  struct tenant_entry : entry {
    std::array<std::uint64_t, rpc_count> rpcs{};
    std::array<std::uint64_t, local_reason_count> rejections{};
  };
  struct shard {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<tenant_entry>, std::less<>> tenants;
    std::map<std::string, std::unique_ptr<entry>, std::less<>> users;  // key: tenant '\0' user
    std::string key;  // reused for look-ups (no allocation per call)
  };
  static constexpr std::size_t shard_count = 8;
  shard& my_shard();
  /// The name a new tenant (user key) is kept under: itself while the bound
  /// allows, else the overflow name. Takes names_mu_.
  std::string_view admit_tenant(std::string_view tenant);
  bool admit_user(const std::string& key);
  // With the shard's mutex held.
  tenant_entry& tenant_in(shard& sh, std::string_view tenant);
  entry& user_in(shard& sh, std::string_view tenant, std::string_view user);
  void add_in(shard& sh, std::string_view tenant, std::string_view user, const usage_figures& f,
              std::int64_t now_ms, const call_usage* call);

  mutable std::array<shard, shard_count> shards_;
  std::atomic<std::size_t> next_shard_{0};
  mutable std::mutex names_mu_;  // the bounds, across shards
  usage_options options_;
  std::set<std::string, std::less<>> kept_tenants_, kept_users_;
  std::atomic<std::uint64_t> tenant_overflows_{0}, user_overflows_{0};
};

/// The process's ledger.
usage_ledger& global_usage();

/// Counters by a label from configuration (e.g. sessions shed per backend
/// pool): the names are fixed by the caller, so the set stays bounded.
class named_counters {
 public:
  void add(std::string_view name, std::uint64_t n = 1);
  std::map<std::string, std::uint64_t, std::less<>> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::uint64_t, std::less<>> counts_;
};

/// New sessions shed (placement.shed_above), by backend pool.
named_counters& global_pool_sheds();

}  // namespace scg::core
