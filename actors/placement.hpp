#pragma once
// Placement: which backend a brand-new session goes to. A plain function over
// a snapshot of the backends, so it is tested without actors or network.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
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
  enum class strategy { least_loaded, round_robin } kind = strategy::least_loaded;
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

/// Parses a strategy name ("least_loaded" | "round_robin").
std::optional<placement_policy::strategy> parse_strategy(const std::string& name);

/// The policy the `placement:` config describes (validated already).
placement_policy make_policy(const config::placement& cfg);

}  // namespace scg::actors
