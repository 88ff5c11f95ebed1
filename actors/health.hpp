#pragma once
// Backend health from a stream of probe results: a run of failures takes a
// backend out of placement, a run of successes brings it back, so one lost
// poll does not flap it.

namespace scg::actors {

/// Healthy/unhealthy with hysteresis over consecutive probe results.
class health_streak {
 public:
  /// What one result did to the health state.
  enum class change { none, became_healthy, became_unhealthy };

  /// `failures_to_down` consecutive failures make a healthy backend unhealthy,
  /// `successes_to_up` consecutive successes make an unhealthy one healthy;
  /// thresholds below 1 count as 1.
  health_streak(int failures_to_down, int successes_to_up, bool initially_healthy = true);

  /// Records one probe result; returns the transition it caused, once, at the
  /// result that completes the run.
  change record(bool success);

  /// The current state.
  bool healthy() const;

  /// Length of the current run of equal results (successes when the last
  /// result was a success, failures otherwise); 0 before any result.
  int streak() const;

 private:
  int failures_to_down_;
  int successes_to_up_;
  bool healthy_;
  bool last_success_ = true;
  int streak_ = 0;
};

}  // namespace scg::actors
