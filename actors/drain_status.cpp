#include "actors/drain_status.hpp"

#include "core/replicated_key.hpp"

#include <algorithm>
#include <cstdio>

namespace scg::actors {

std::string encode_activity(const activity& a) {
  return "ops=" + std::to_string(a.live_operations) + " sessions=" + std::to_string(a.active_sessions) +
         " calls=" + std::to_string(a.calls_in_flight) + " last=" + std::to_string(a.last_activity_wall_ms);
}

std::optional<activity> decode_activity(const std::string& text) {
  unsigned long long ops = 0, sessions = 0, calls = 0;
  long long last = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "ops=%llu sessions=%llu calls=%llu last=%lld%n", &ops, &sessions, &calls, &last,
                  &used) != 4 ||
      static_cast<std::size_t>(used) != text.size())
    return std::nullopt;
  return activity{ops, sessions, calls, last};
}

// A newline parts the two: node and backend names may hold '/', not a newline.
std::string activity_key(const std::string& node, const std::string& backend) {
  return core::make_key(core::key_kind::activity, node + "\n" + backend);
}

std::optional<std::pair<std::string, std::string>> parse_activity_id(const std::string& id) {
  auto cut = id.find('\n');
  if (cut == std::string::npos || cut == 0 || cut + 1 == id.size()) return std::nullopt;
  return std::pair{id.substr(0, cut), id.substr(cut + 1)};
}

const char* to_string(drain_state s) {
  switch (s) {
    case drain_state::serving: return "serving";
    case drain_state::draining: return "draining";
    case drain_state::idle: return "idle";
  }
  return "serving";
}

drain_status decide(bool draining, const activity& local, const std::vector<peer_report>& peers,
                    std::int64_t now_wall_ms) {
  drain_status s;
  s.total = local;
  for (const auto& p : peers) {
    if (!p.up) continue;
    if (p.report) {
      s.total.live_operations += p.report->live_operations;
      s.total.active_sessions += p.report->active_sessions;
      s.total.calls_in_flight += p.report->calls_in_flight;
      s.total.last_activity_wall_ms = std::max(s.total.last_activity_wall_ms, p.report->last_activity_wall_ms);
    }
    if (!p.report || now_wall_ms - p.written_wall_ms > activity_stale_ms) s.waiting_for.push_back(p.node);
  }
  if (!draining)
    s.state = drain_state::serving;
  else
    s.state = s.total.quiet() && s.waiting_for.empty() ? drain_state::idle : drain_state::draining;
  return s;
}

std::string holders(const drain_status& s) {
  std::string out;
  auto add = [&](std::size_t n, const char* what) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  add(s.total.live_operations, "live operation");
  add(s.total.active_sessions, "active session");
  add(s.total.calls_in_flight, "call in flight");
  if (!s.waiting_for.empty()) {
    if (!out.empty()) out += ", ";
    out += "waiting for the report of";
    for (const auto& n : s.waiting_for) out += " " + n;
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace scg::actors
