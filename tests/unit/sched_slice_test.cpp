#include "core/sched_slice.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <thread>

using scg::core::request_sched_slice;
using scg::core::sched_slice_of_this_thread;
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
    CHECK(sched_slice_of_this_thread() == std::chrono::nanoseconds(200'000));
    CHECK(getpriority(PRIO_PROCESS, tid) == 5);
    std::optional<std::chrono::nanoseconds> child;
    std::thread([&] { child = sched_slice_of_this_thread(); }).join();
    CHECK(child == std::chrono::nanoseconds(200'000));
  }).join();
}
