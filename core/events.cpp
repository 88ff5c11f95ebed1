#include "core/events.hpp"

#include <chrono>

namespace scg::core {

std::uint64_t event_ring::record(std::string_view kind, std::string text) {
  using namespace std::chrono;
  const auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  std::lock_guard lock{mu_};
  const auto seq = next_seq_++;
  events_.push_back({seq, now, std::string(kind), std::move(text)});
  if (events_.size() > capacity_) events_.pop_front();
  return seq;
}

std::vector<event> event_ring::since(std::uint64_t after) const {
  std::lock_guard lock{mu_};
  std::vector<event> out;
  for (const auto& e : events_)
    if (e.seq > after) out.push_back(e);
  return out;
}

event_ring& global_events() {
  static event_ring ring;
  return ring;
}

}  // namespace scg::core
