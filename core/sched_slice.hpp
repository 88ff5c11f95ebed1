#pragma once
// The scheduling slice scg asks of Linux for its threads (limits.sched_slice_us).
// A thread that wakes with work (a call's bytes, a placement question, a
// peer's answer) waits for a busy core until the running task's slice ends,
// 1.4 ms on the project's 2-core machine; Linux 6.12 and later let a task ask
// for a shorter slice (sched_setattr's sched_runtime under SCHED_OTHER, 0.1
// to 100 ms), which lets it preempt on wake-up. The preemptions cost CPU per
// call (docs/configuration.md, limits). Threads inherit it: set before any
// is started.

#include <chrono>
#include <optional>
#include <string>

namespace scg::core {

struct sched_slice_result {
  bool applied = false;
  std::string reason;  ///< why not, when not applied
};

/// Asks for `slice` on the calling thread (and the threads it starts from
/// now on), keeping its policy and nice value; zero asks nothing.
sched_slice_result request_sched_slice(std::chrono::microseconds slice);

/// The calling thread's slice as Linux keeps it (sched_getattr's
/// sched_runtime: 0 on kernels that keep their own); nullopt when unreadable.
std::optional<std::chrono::nanoseconds> sched_slice_of_this_thread();

}  // namespace scg::core
