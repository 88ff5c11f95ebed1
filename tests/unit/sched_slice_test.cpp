#include "core/sched_slice.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <thread>

using scg::core::request_sched_slice;
using us = std::chrono::microseconds;

namespace {

// Whether this kernel takes a slice per task: Linux 6.12 or later.
bool kernel_has_custom_slices() {
  utsname u{};
  if (uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 12);
}

std::uint64_t runtime_ns_of_this_thread() {
  struct {
    std::uint32_t size, policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime, deadline, period;
    std::uint32_t util_min, util_max;
  } a{};
  REQUIRE(syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0);
  return a.runtime;
}

}  // namespace

TEST_CASE("zero asks the kernel for nothing", "[sched_slice]") {
  const auto r = request_sched_slice(us(0));
  CHECK_FALSE(r.applied);
  CHECK(r.reason.find("sched_slice_us") != std::string::npos);
}

TEST_CASE("a slice is set on the calling thread, passes to the threads it starts and keeps its nice value",
          "[sched_slice]") {
  // On a thread of its own, niced (lowering a priority needs no privilege),
  // so the test process's other threads keep the kernel's defaults.
  std::thread([] {
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    REQUIRE(setpriority(PRIO_PROCESS, tid, 5) == 0);
    const auto r = request_sched_slice(us(200));
    if (!kernel_has_custom_slices()) {
      CHECK_FALSE(r.applied);
      CHECK(r.reason.find("6.12") != std::string::npos);
      return;
    }
    REQUIRE(r.applied);
    CHECK(r.reason.empty());
    CHECK(runtime_ns_of_this_thread() == 200'000);
    errno = 0;
    CHECK(getpriority(PRIO_PROCESS, tid) == 5);
    std::uint64_t child = 0;
    std::thread([&] { child = runtime_ns_of_this_thread(); }).join();
    CHECK(child == 200'000);
  }).join();
}
