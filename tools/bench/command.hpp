#pragma once
// What every scg-bench command takes and shares: its flags (cli_args, parsed
// and checked in main.cpp) and the rounding of the figures it prints.

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace scg::bench {

/// `--name value` and `--name=value` pairs. Readers record the first problem in
/// `error`; `finish` adds flags nobody asked for.
struct cli_args {
  std::map<std::string, std::string> values;
  std::set<std::string> read;
  std::string error;

  static cli_args parse(int argc, char** argv, int first);
  void fail(const std::string& message);
  std::string text(const std::string& name, std::optional<std::string> fallback = std::nullopt);
  /// A decimal integer >= `min`; 0 after recording an error.
  int64_t number(const std::string& name, std::optional<int64_t> fallback, int64_t min);
  /// True when every flag was read and valid; prints the problem otherwise.
  bool finish();
};

/// `value` rounded to `digits` decimals.
inline double round_to(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

}  // namespace scg::bench
