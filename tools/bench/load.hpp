#pragma once
// The load generators of scg-bench (load.cpp): each command runs one kind of
// load against --target and prints one JSON line on stdout.

#include "tools/bench/command.hpp"

namespace scg::bench {

/// Config calls at --concurrency for a window: throughput and latency.
int run_unary(cli_args& args);
/// --count Config calls, each with a new session: how fast sessions open.
int run_sessions(cli_args& args);
/// One ExecutePlan of --bytes in --message-bytes messages: MB/s.
int run_stream(cli_args& args);
/// Unary load and a stream reader beside N stalled readers; scg's RSS.
int run_stalled(cli_args& args);
/// Writes the gRPC-framed ConfigRequest h2load sends (`-d FILE`).
int run_frame_config(cli_args& args);

}  // namespace scg::bench
