#pragma once
// Paces the merging of a burst of repair messages (a full sync, a large
// anti-entropy repair) to a share of one core: the cluster actor holds a
// message's acknowledgment back as long as this says, and the sender sends
// at most a few messages ahead of its acks. Pure, no actors
// (tests/unit/merge_pacer_test.cpp); cluster/replication.cpp holds the acks.

#include <chrono>

namespace scg::cluster {

class merge_pacer {
 public:
  using clock = std::chrono::steady_clock;

  /// Merges paced to `share` of one core (0 < share <= 1) once a burst has
  /// worked `free`; a message more than `burst_gap` after the last one
  /// starts a new burst.
  merge_pacer(double share, std::chrono::microseconds free, clock::duration burst_gap)
      : share_(share), free_(free), burst_gap_(burst_gap) {}

  /// A message merged from `began` to `now`: how long its acknowledgment
  /// waits (zero: at once) so that the burst's work stays within the share.
  std::chrono::microseconds merged(clock::time_point began, clock::time_point now);

 private:
  double share_;
  std::chrono::microseconds free_;
  clock::duration burst_gap_;
  clock::time_point burst_started_, last_;
  std::chrono::microseconds work_{};
};

}  // namespace scg::cluster
