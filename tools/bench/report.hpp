#pragma once
// The report of scg-bench (report.cpp): bench.sh's raw records in, the tables
// (statistics, ratios, aims, warnings) out, also as JSON and Markdown.

#include "tools/bench/command.hpp"

namespace scg::bench {

/// Reads --raw and prints the report; writes --json and --markdown when given.
int run_report(cli_args& args);

}  // namespace scg::bench
