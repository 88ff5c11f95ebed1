#include "actors/placement.hpp"

#include <algorithm>

namespace scg::actors {

double score(const placement_policy& p, const candidate& c) {
  double util = std::clamp(c.utilization.value_or(0.0), 0.0, 1.0);
  double cap = p.session_cap == 0 ? 1.0 : static_cast<double>(p.session_cap);
  double fill = std::min(static_cast<double>(c.sessions) / cap, 1.0);
  return p.utilization_weight * util + p.session_weight * fill;
}

std::optional<std::size_t> place(const placement_policy& p, const std::vector<candidate>& backends,
                                 std::uint64_t& cursor) {
  const std::size_t n = backends.size();
  if (n == 0) return std::nullopt;
  const std::size_t start = cursor++ % n;
  std::optional<std::size_t> best;
  double best_score = 0;
  // Visit backends from a rotating start: round_robin takes the first
  // eligible one, least_loaded the lowest score (first wins a tie).
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t i = (start + k) % n;
    if (!backends[i].eligible) continue;
    if (p.kind == placement_policy::strategy::round_robin) return i;
    double s = score(p, backends[i]);
    if (!best || s < best_score) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

bool all_above(const placement_policy& p, const std::vector<candidate>& backends, double shed_above) {
  bool any = false;
  for (const auto& c : backends) {
    if (!c.eligible) continue;
    if (score(p, c) <= shed_above) return false;
    any = true;
  }
  return any;
}

std::optional<placement_policy::strategy> parse_strategy(const std::string& name) {
  return config::from_name(config::placement_strategy_names, name);
}

placement_policy make_policy(const config::placement& cfg) {
  placement_policy p;
  p.kind = cfg.strategy;
  p.utilization_weight = cfg.utilization_weight;
  p.session_weight = cfg.session_weight;
  p.session_cap = static_cast<std::size_t>(cfg.session_cap);
  return p;
}

bool in_pool(const std::vector<std::string>* pool, const std::string& name) {
  if (!pool) return true;
  for (const auto& p : *pool)
    if (name == p || (name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '@'))
      return true;
  return false;
}

pool_load load_of_pool(const placement_policy& p, const std::vector<candidate>& members) {
  pool_load out;
  out.backends = members.size();
  double sum = 0;
  for (const auto& c : members) {
    out.sessions += c.sessions;
    if (!c.eligible) continue;
    const double s = score(p, c);
    out.score_min = out.eligible == 0 ? s : std::min(out.score_min, s);
    out.score_max = out.eligible == 0 ? s : std::max(out.score_max, s);
    sum += s;
    ++out.eligible;
  }
  if (out.eligible > 0) {
    out.score_mean = sum / static_cast<double>(out.eligible);
    out.saturation = out.score_mean;
  }
  return out;
}

}  // namespace scg::actors
