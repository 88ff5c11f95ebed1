#include "cluster/merge_pacer.hpp"

#include "core/pacing.hpp"

namespace scg::cluster {

std::chrono::microseconds merge_pacer::merged(clock::time_point began, clock::time_point now) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  if (began - last_ > burst_gap_) {
    burst_started_ = began;
    work_ = {};
  }
  last_ = now;
  work_ += duration_cast<microseconds>(now - began);
  if (work_ < free_) return microseconds(0);
  return core::pace_delay(work_, duration_cast<microseconds>(now - burst_started_), share_);
}

}  // namespace scg::cluster
