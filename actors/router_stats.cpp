#include "actors/router_stats.hpp"

namespace scg::actors {

void router_stats::render(core::prometheus_writer& w) const {
  SCG_ROUTER_COUNTERS(SCG_STAT_COUNTER)
  SCG_ROUTER_GAUGES(SCG_STAT_GAUGE)
  const struct {
    const char* name;
    const char* help;
    const core::histogram<core::decision_bounds_us.size()>& h;
  } histograms[] = {
      {"router_decision_seconds", "Time a call waited for the router to place its new or rebound session",
       router_decision},
      {"router_owner_answer_seconds",
       "Time the key's owner, another replica, took to answer a placement question (or the question to time out)",
       owner_answer},
  };
  for (const auto& x : histograms) core::render_histogram(w, x.name, x.help, x.h, core::decision_bounds_us);
}

router_stats& global_router_stats() {
  static router_stats s;
  return s;
}

}  // namespace scg::actors
