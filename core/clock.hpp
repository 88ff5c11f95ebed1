#pragma once
// The two clocks scg reads: a steady one for local timing (the session
// table, timers, rates) and the wall clock replicas compare.

#include <cstdint>

namespace scg::core {

using clock_ms = std::int64_t;  ///< milliseconds of a monotonic clock

/// Milliseconds on the steady clock: the time base of the session table.
clock_ms now_ms();

/// Milliseconds on the wall clock: what replicas compare (versions, starts).
std::int64_t wall_now_ms();

/// A steady time of this process as wall-clock ms, and back: what replicas
/// exchange (their steady clocks share no origin).
std::int64_t wall_of(clock_ms steady);
clock_ms steady_of(std::int64_t wall_ms);

}  // namespace scg::core
