#pragma once
// Backend load: what the Spark UI REST API says about a backend's task slots
// and queued work, reduced to one utilization number and smoothed over polls.
// Plain functions over response bodies, so they are tested without network.

#include <optional>
#include <string>
#include <string_view>

namespace scg::actors {

/// Task counts of one Spark application at one poll; all non-negative.
struct spark_load {
  double slots = 0;    ///< tasks the cluster can run at once
  double active = 0;   ///< tasks running now
  double pending = 0;  ///< tasks of active stages waiting for a slot
};

/// Either a load or an error naming what is wrong with the responses.
struct load_result {
  std::optional<spark_load> load;
  std::string error;  ///< empty when `load` is set
};

/// Reads the bodies of `/api/v1/applications/{id}/executors` and
/// `…/stages?status=active`. Slots come from active executors other than the
/// driver (maxTasks, else totalCores); when the driver is the only active
/// entry (local mode) its slots count instead. Active tasks include the
/// driver's. Pending is Σ max(0, numTasks − numActiveTasks −
/// numCompletedIndices) over the stages (numCompleteTasks when the index
/// count is absent). Negative counts count as 0; counts above 1e15 are out of
/// range. Never throws; any malformed body gives an error such as
/// "executors[2].activeTasks: expected a number".
load_result parse_spark_load(std::string_view executors_json, std::string_view stages_json);

/// The `id` of the first application in a `/api/v1/applications` body; empty,
/// with `error` set, when the body is malformed or lists no application.
std::string app_id_from_applications(std::string_view applications_json, std::string& error);

/// (active + pending) / slots clipped to [0, 1]. With no slots, 1 when any
/// task is running or waiting and 0 otherwise.
double utilization(const spark_load& load);

/// Exponentially weighted moving average of a stream of samples.
class ewma {
 public:
  /// `alpha` is the weight of a new sample, clipped to [0, 1] (NaN counts as 1).
  explicit ewma(double alpha);

  /// The first sample sets the value, later ones move it by alpha × (sample −
  /// value). Non-finite samples are ignored.
  void add(double sample);

  /// The current average, nullopt before the first sample.
  std::optional<double> value() const;

  /// Forgets all samples, as if freshly constructed.
  void reset();

 private:
  double alpha_;
  std::optional<double> value_;
};

}  // namespace scg::actors
