#pragma once
// The nemesis checker: reads the history of a run under randomized faults
// (tests/integration/nemesis_test.cpp writes it, one JSON object a line) and
// counts what broke docs/contract.md's invariants 1-4. Pure: no processes, no
// network (tests/unit/nemesis_checker_test.cpp feeds it made-up histories).
// What counts as allowed under which fault: docs/cluster.md, "Under faults".

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace scg::nemesis {

/// One call the workload made, as its client saw it.
struct call {
  std::int64_t start_ms = 0, end_ms = 0;  ///< since the run's start
  std::string replica;                    ///< the replica it was sent to
  std::string rpc;        ///< config, execute, reattach, release_execute, analyze, clone, release_session
  std::string session;    ///< the session id it carried
  std::string op;         ///< the operation id, for execute / reattach / release_execute
  bool by_op = false;     ///< routed by its operation (reattach, release_execute)
  /// by_op under a session id no backend knows: the operation's backend
  /// answers INVALID_HANDLE.SESSION_NOT_FOUND, and which backend answered is the point
  bool probe = false;
  std::string backend;    ///< x-fake-backend of the answer; empty when scg (or nobody) answered
  int code = 0;           ///< gRPC status code
  std::string message;    ///< the status message when code != 0
  std::string new_session;  ///< clone: the session it made (session is the one it cloned)
};

/// One fault the nemesis caused.
struct fault {
  std::string kind;  ///< kill, freeze, restart, partition, split, join, leave, backend_kill
  std::int64_t start_ms = 0, end_ms = 0;  ///< end: healed, thawed, restarted or joined
  std::vector<std::string> targets;       ///< replicas (or the backend) it hit
};

/// The time the cluster took to agree again after one heal.
struct convergence {
  std::int64_t heal_ms = 0;
  std::int64_t after_ms = -1;  ///< -1: it did not agree within the probe's limit
};

/// What one replica's table said of one session at the end of the run.
struct final_view {
  std::string session, replica, backend;  ///< backend empty: not in its table
};

struct history {
  std::uint64_t seed = 0;
  std::int64_t secs = 0;
  std::vector<call> calls;
  std::vector<fault> faults;
  std::vector<convergence> heals;
  std::vector<final_view> finals;
};

/// Writes `h` as JSON lines; reads them back (a line that is not one of
/// the records is an error naming its number, in *error).
void write_history(const history& h, std::ostream& out);
bool read_history(std::istream& in, history& h, std::string* error);

/// How long after a membership fault (and before it, for writes still in
/// flight when it struck) replicas may disagree about who owns a key.
struct windows {
  std::int64_t before_ms = 100;   ///< a delta is flushed 5 ms after its write
  std::int64_t settle_ms = 3000;  ///< a peer is seen down within ~1.25 s, up again within ~1 s
  /// scg refuses an operation id nobody knows (operation_unsettled) for
  /// cluster.settle_ms (3 s) after a replica sees a member come or go, which
  /// it sees up to ~1.25 s after the fault; and after the run's start.
  std::int64_t unsettled_ms = 5000;
  std::int64_t converge_limit_ms = 5000;  ///< a heal must converge within this
};

/// The checker's counts. `violations` is the sum of the ones that must be 0.
struct report {
  std::size_t calls = 0, ok_calls = 0, sessions = 0, operations = 0, faults = 0;
  // violations
  std::size_t session_changes = 0;      ///< a session bound outside a fault window served by two backends, or SESSION_CHANGED
  std::size_t op_misroutes = 0;         ///< operations whose calls reached more than one backend
  std::size_t lost_bindings = 0;        ///< a session served and not released that a live replica lacked at the end
  std::size_t new_session_disagreements = 0;  ///< a new session's first calls at two replicas got two backends
  std::size_t unexpected_failures = 0;  ///< failed with a status not documented for the faults around it
  std::size_t final_disagreements = 0;  ///< replicas named different backends for a session at the end
  std::size_t unconverged_heals = 0;    ///< heals after which the replicas did not agree within the limit
  // allowed, counted
  std::size_t allowed_session_changes = 0;  ///< sessions first bound while replicas disagreed on membership
  std::size_t allowed_op_misroutes = 0;     ///< operations started or followed while replicas disagreed
  std::size_t allowed_lost_bindings = 0;
  std::size_t allowed_disagreements = 0;
  std::size_t allowed_failures = 0;         ///< failed with a documented status under a fault
  std::map<std::string, std::size_t> failures_by_status;  ///< "CODE class" -> count, every failed call
  /// allowed_op_misroutes by why: "died" (the starting replica died before the
  /// delta went out), or the fault that kept the replicas apart
  std::map<std::string, std::size_t> allowed_op_misroutes_by;
  std::vector<std::int64_t> convergence_ms;               ///< each converged heal
  std::vector<std::string> examples;                      ///< the first few violations, described
  std::size_t violations() const {
    return session_changes + op_misroutes + lost_bindings + new_session_disagreements + unexpected_failures +
           final_disagreements + unconverged_heals;
  }
  /// Percentile `p` (0-100) of convergence_ms, -1 when none.
  std::int64_t convergence_percentile(double p) const;
};

report check(const history& h, const windows& w = {});

/// Prints every count, one `name=value` a line (scripts/nemesis.sh reads them).
void print_report(const report& r, std::ostream& out);

}  // namespace scg::nemesis
