#pragma once
// Placement: which backend a brand-new session goes to. A plain function over
// a snapshot of the backends, so it is tested without actors or network.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace scg::actors {

/// What placement knows of one backend at decision time.
struct candidate {
  bool eligible = true;        ///< reachable/healthy and not draining
  std::size_t sessions = 0;    ///< sessions bound to it
  std::optional<double> utilization;  ///< EWMA in [0, 1]; nullopt until polled
};

/// Placement settings (config `placement:`).
struct placement_policy {
  using strategy = config::placement_strategy;
  strategy kind = strategy::least_loaded;
  double utilization_weight = 0.9;
  double session_weight = 0.1;
  std::size_t session_cap = 50;
};

/// score = w_u × utilization + w_s × min(sessions / cap, 1); a backend never
/// polled counts utilization 0, so it is scored on sessions alone.
double score(const placement_policy& p, const candidate& c);

/// Picks the index of a backend for a new session, nullopt when none is
/// eligible. `cursor` is the caller's rotating counter: round_robin steps
/// through eligible backends with it, least_loaded uses it to break ties so
/// equal backends share a burst.
std::optional<std::size_t> place(const placement_policy& p, const std::vector<candidate>& backends,
                                 std::uint64_t& cursor);

/// Shedding: true when at least one backend is eligible and every eligible
/// one scores above `shed_above` (all of them are too busy for a new session).
bool all_above(const placement_policy& p, const std::vector<candidate>& backends, double shed_above);

/// True when backend `name` is in `pool` (nullptr: every backend is). A pool
/// entry NAME also covers the NAME@ADDRESS backends of a `resolve: all` entry.
bool in_pool(const std::vector<std::string>* pool, const std::string& name);

/// The pool label of the backends a tenant without `tenants.pools` entry may use (all of them).
inline constexpr std::string_view all_pool = "_all";

/// What placement sees of one pool (the backends one tenant may use): the
/// autoscaling signal. Scores are over eligible backends only.
struct pool_load {
  std::size_t backends = 0;  ///< in the pool
  std::size_t eligible = 0;  ///< of them: healthy, not draining, not removed
  std::size_t sessions = 0;  ///< bound to the pool's backends
  double score_min = 0, score_mean = 0, score_max = 0;  ///< 0 with none eligible
  /// The mean score of eligible backends; 1 when none is eligible (a pool
  /// that cannot take a session is full).
  double saturation = 1;
};
/// `members` are the pool's backends as placement sees them.
pool_load load_of_pool(const placement_policy& p, const std::vector<candidate>& members);

/// The strategy a name stands for ("least_loaded" | "round_robin"; config::placement_strategy_names).
std::optional<placement_policy::strategy> parse_strategy(const std::string& name);

/// The policy the `placement:` config describes (validated already).
placement_policy make_policy(const config::placement& cfg);

}  // namespace scg::actors
