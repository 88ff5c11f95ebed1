#include "actors/load.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include <nlohmann/json.hpp>

namespace scg::actors {
namespace {

using json = nlohmann::json;

// Far above any real cluster's task count and still exact in a double, so
// sums over a response stay finite whatever the input.
constexpr double max_count = 1e15;

std::string field_name(const char* list, std::size_t i, const char* key) {
  return std::string(list) + "[" + std::to_string(i) + "]." + key;
}

json parse_body(std::string_view body) {
  return json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
}

/// Reads `obj[key]` as a task count into `out` (negative counts as 0); false
/// with `error` set when present but not a number in range. Absent leaves
/// `out` empty.
bool read_count(const json& obj, const char* list, std::size_t i, const char* key,
                std::optional<double>& out, std::string& error) {
  auto it = obj.find(key);
  if (it == obj.end()) return true;
  if (!it->is_number()) {
    error = field_name(list, i, key) + ": expected a number";
    return false;
  }
  double v = it->get<double>();
  if (!std::isfinite(v) || v > max_count) {
    error = field_name(list, i, key) + ": number out of range";
    return false;
  }
  out = std::max(v, 0.0);
  return true;
}

/// Like read_count, but an absent field is an error too.
bool require_count(const json& obj, const char* list, std::size_t i, const char* key,
                   double& out, std::string& error) {
  std::optional<double> v;
  if (!read_count(obj, list, i, key, v, error)) return false;
  if (!v) {
    error = field_name(list, i, key) + ": missing";
    return false;
  }
  out = *v;
  return true;
}

/// Reads `primary`, falling back to `fallback` when absent; one is required.
bool count_with_fallback(const json& obj, const char* list, std::size_t i, const char* primary,
                         const char* fallback, double& out, std::string& error) {
  std::optional<double> v;
  if (!read_count(obj, list, i, primary, v, error)) return false;
  if (!v && !read_count(obj, list, i, fallback, v, error)) return false;
  if (!v) {
    error = field_name(list, i, primary) + ": missing (and no " + fallback + ")";
    return false;
  }
  out = *v;
  return true;
}

bool is_driver(const std::string& id) {
  // Spark before 2.0 named the driver "<driver>".
  return id == "driver" || id == "<driver>";
}

/// Fills slots and active from the executors body; an error message or "".
std::string read_executors(std::string_view body, spark_load& load) {
  const char* list = "executors";
  json doc = parse_body(body);
  if (doc.is_discarded()) return "executors: not valid JSON";
  if (!doc.is_array()) return "executors: expected a JSON array";
  double executor_slots = 0;
  double driver_slots = 0;
  bool any_executor = false;
  std::string error;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& e = doc[i];
    if (!e.is_object()) return "executors[" + std::to_string(i) + "]: expected an object";
    auto active_it = e.find("isActive");
    if (active_it != e.end()) {
      if (!active_it->is_boolean()) return field_name(list, i, "isActive") + ": expected a boolean";
      // A lost executor holds no slots and runs nothing.
      if (!active_it->get<bool>()) continue;
    }
    auto id_it = e.find("id");
    if (id_it == e.end()) return field_name(list, i, "id") + ": missing";
    if (!id_it->is_string()) return field_name(list, i, "id") + ": expected a string";
    double running = 0;
    double slots = 0;
    if (!require_count(e, list, i, "activeTasks", running, error)) return error;
    if (!count_with_fallback(e, list, i, "maxTasks", "totalCores", slots, error)) return error;
    load.active += running;
    if (is_driver(id_it->get_ref<const std::string&>())) {
      driver_slots += slots;
    } else {
      executor_slots += slots;
      any_executor = true;
    }
  }
  // In cluster mode the driver runs no tasks; in local mode it is the executor.
  load.slots = any_executor ? executor_slots : driver_slots;
  return {};
}

/// Fills pending from the active-stages body; an error message or "".
std::string read_stages(std::string_view body, spark_load& load) {
  const char* list = "stages";
  json doc = parse_body(body);
  if (doc.is_discarded()) return "stages: not valid JSON";
  if (!doc.is_array()) return "stages: expected a JSON array";
  std::string error;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& s = doc[i];
    if (!s.is_object()) return "stages[" + std::to_string(i) + "]: expected an object";
    double tasks = 0;
    double running = 0;
    double done = 0;
    if (!require_count(s, list, i, "numTasks", tasks, error)) return error;
    if (!require_count(s, list, i, "numActiveTasks", running, error)) return error;
    // Indices, not tasks: a retried or speculative task completes one index twice.
    if (!count_with_fallback(s, list, i, "numCompletedIndices", "numCompleteTasks", done, error)) {
      return error;
    }
    load.pending += std::max(0.0, tasks - running - done);
  }
  return {};
}

}  // namespace

load_result parse_spark_load(std::string_view executors_json, std::string_view stages_json) {
  spark_load load;
  load_result result;
  result.error = read_executors(executors_json, load);
  if (result.error.empty()) result.error = read_stages(stages_json, load);
  if (result.error.empty()) result.load = load;
  return result;
}

std::string app_id_from_applications(std::string_view applications_json, std::string& error) {
  json doc = parse_body(applications_json);
  if (doc.is_discarded()) {
    error = "applications: not valid JSON";
    return {};
  }
  if (!doc.is_array()) {
    error = "applications: expected a JSON array";
    return {};
  }
  if (doc.empty()) {
    error = "applications: no application listed";
    return {};
  }
  const json& app = doc[0];
  if (!app.is_object()) {
    error = "applications[0]: expected an object";
    return {};
  }
  auto it = app.find("id");
  if (it == app.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    error = "applications[0].id: expected a non-empty string";
    return {};
  }
  return it->get<std::string>();
}

double utilization(const spark_load& load) {
  // Written so that NaN counts as 0: `x > 0` is false for NaN.
  auto nonneg = [](double x) { return x > 0 ? x : 0.0; };
  double busy = nonneg(load.active) + nonneg(load.pending);
  double slots = nonneg(load.slots);
  if (slots == 0) return busy > 0 ? 1.0 : 0.0;
  double u = busy / slots;
  if (std::isnan(u)) return 1.0;  // infinite work over infinite slots: call it busy
  return std::min(u, 1.0);
}

ewma::ewma(double alpha) : alpha_(std::isnan(alpha) ? 1.0 : std::clamp(alpha, 0.0, 1.0)) {}

void ewma::add(double sample) {
  if (!std::isfinite(sample)) return;
  if (!value_) {
    value_ = sample;
  } else {
    value_ = alpha_ * sample + (1.0 - alpha_) * *value_;
  }
}

std::optional<double> ewma::value() const { return value_; }

void ewma::reset() { value_.reset(); }

}  // namespace scg::actors
