#pragma once
// A small, bounded log of notable events (rebinds, drains, shedding) that the
// admin API and the status page show. Pure and thread-safe; older events fall
// off the end, so it never grows.

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace scg::core {

/// One entry of the ring.
struct event {
  std::uint64_t seq = 0;     ///< 1, 2, 3… in record order; lets a poller ask for what is new
  std::int64_t time_ms = 0;  ///< wall clock, ms since the Unix epoch
  std::string kind;          ///< short machine-readable tag: "rebind", "drain", "shed", …
  std::string text;          ///< one human-readable line
};

/// The last `capacity` events; every method may be called from any thread.
class event_ring {
 public:
  explicit event_ring(std::size_t capacity = 200) : capacity_(capacity) {}

  /// Appends an event stamped with the current wall-clock time; its seq.
  std::uint64_t record(std::string_view kind, std::string text);

  /// The kept events with seq > `after`, oldest first.
  std::vector<event> since(std::uint64_t after = 0) const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::deque<event> events_;
  std::uint64_t next_seq_ = 1;
};

/// The process's ring.
event_ring& global_events();

/// Records an event in the process's ring (what other components call).
inline void record_event(std::string_view kind, std::string text) {
  global_events().record(kind, std::move(text));
}

}  // namespace scg::core
