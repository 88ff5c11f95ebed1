#include "core/sched_slice.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace scg::core {
namespace {

// The kernel's struct sched_attr (uapi/linux/sched/types.h); glibc 2.36 has
// no wrapper for sched_setattr/sched_getattr.
struct kernel_sched_attr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
  std::uint32_t sched_util_min;
  std::uint32_t sched_util_max;
};

bool get_attr(kernel_sched_attr& a) {
  a = {};
  return syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0;
}

}  // namespace

std::optional<std::chrono::nanoseconds> sched_slice_of_this_thread() {
  kernel_sched_attr a{};
  if (!get_attr(a)) return std::nullopt;
  return std::chrono::nanoseconds(a.sched_runtime);
}

sched_slice_result request_sched_slice(std::chrono::microseconds slice) {
  if (slice.count() <= 0) return {false, "not asked (limits.sched_slice_us: 0)"};
  kernel_sched_attr a{};
  if (!get_attr(a)) return {false, std::string("sched_getattr: ") + std::strerror(errno)};
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
    return {false, "the process runs under another scheduling policy (" + std::to_string(a.sched_policy) + ")"};
  const auto wanted = static_cast<std::uint64_t>(slice.count()) * 1000;
  a.size = sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = wanted;  // the nice value and policy read above are kept
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return {false, std::string("sched_setattr: ") + std::strerror(errno)};
  // Kernels before 6.12 accept sched_runtime for SCHED_OTHER and ignore it.
  if (sched_slice_of_this_thread() != std::chrono::nanoseconds(wanted))
    return {false, "the kernel keeps its own slices (needs Linux 6.12 or later)"};
  return {true, {}};
}

}  // namespace scg::core
