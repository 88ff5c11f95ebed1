#pragma once
// A replay (on_backend_lost.action: replay, docs/replay.md): the session is
// opened under the same id on its new server, and its journal
// (net/session_journal.hpp) is run there in order, with results discarded.
// The calls go out on the backend's own gRPC channel (as health probes and
// interrupts do), not on a worker's HTTP/2 connection.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "actors/backend.hpp"
#include "net/session_journal.hpp"

namespace scg::net {

struct replay_outcome {
  bool ok = false;
  std::string server_id;             ///< the new server's server_side_session_id
  std::string failed;                ///< what could not be restored, and why (when not ok)
  std::vector<std::string> skipped;  ///< optional entries the server refused (a database it lacks)
  std::size_t replayed = 0;          ///< entries run
};

/// What a replay is given.
struct replay_request {
  std::string session_id;
  std::string user_id;  ///< the user Spark sees (auth::spark_user_id)
  std::vector<journal_entry> entries;
  std::string token;                            ///< scg's backend token ("" when none)
  std::chrono::milliseconds per_call{60000};   ///< each call's deadline
};

/// Opens the session on `backend` (a Config get_option with no keys, which
/// also tells its new server-side id), then runs the entries in order, one
/// at a time. `done` is called once, on a gRPC thread.
void replay_journal(actors::backend_state& backend, replay_request request, std::function<void(replay_outcome)> done);

/// A short description of an entry for errors and logs ("Config set
/// spark.sql.shuffle.partitions", "ExecutePlan view:v").
std::string describe(const journal_entry& e);

}  // namespace scg::net
