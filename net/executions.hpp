#pragma once
// Executions by operation: what limits.max_executions and max_execution_secs
// count. A Spark server cuts a reattachable result stream every
// senderMaxStreamDuration (2 min) or senderMaxStreamSize, and the client
// continues it with ReattachExecute: one operation, many streams. The
// ledger keeps each operation's slot and start time from its ExecutePlan to
// its end, so a query that was admitted keeps its slot at every reattach and
// its time limit counts from its start, not from its latest stream.
// An operation that waits rather than computes (a listener bus, an
// awaitTermination: net/wire.hpp plan_kind) is known here without a slot,
// so that its reattaches are exempt from both limits as its ExecutePlan was.
// Pure and thread-safe (workers share it); tested in tests/unit/executions_test.cpp.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

namespace scg::net {

class execution_ledger {
 public:
  using ms = std::int64_t;  ///< steady-clock milliseconds

  /// What a stream of a known operation learns when it attaches.
  struct attached {
    ms started;         ///< the operation's start: its time limit counts from here
    bool killed;        ///< scg already ended it at max_execution_secs
    bool waiting;       ///< it waits rather than computes: no slot, no time limit
  };

  /// Takes a slot of `tenant` for a new execution (ExecutePlan) unless `cap`
  /// slots are in use (cap 0: no limit). The caller holds it until it hands
  /// it to the operation (adopt) or gives it back (give_back).
  bool try_take(const std::string& tenant, int cap);
  void give_back(const std::string& tenant);

  /// The caller's slot now belongs to operation `op` of `tenant`, started at
  /// `started`, with one stream attached. An operation already known (an
  /// ExecutePlan sent again with its id) keeps its own slot: the caller's is
  /// given back.
  void adopt(const std::string& op, const std::string& tenant, ms started);

  /// Operation `op` of `tenant`, started at `started`, waits rather than
  /// computes: it is known, with one stream attached, but holds no slot.
  /// An operation already known (an ExecutePlan sent again) stays as it is.
  void adopt_waiting(const std::string& op, const std::string& tenant, ms started);

  /// A continuation (ReattachExecute) of `op` attaches; nullopt when this
  /// replica does not know the operation.
  std::optional<attached> attach(const std::string& op);

  /// A continuation of `op` that this replica has not seen start (it began
  /// on another replica, or before a restart): known from now, started
  /// `started`; it takes a slot when one is free but is never refused.
  attached attach_unknown(const std::string& op, const std::string& tenant, int cap, ms started);

  /// A stream of `op` ended but the operation goes on (the server cut it,
  /// or the client went away): it may be reattached until `detached_ttl`.
  void detach(const std::string& op, ms now);

  /// The operation ended (its result complete, an error, released): its
  /// slot is free.
  void finish(const std::string& op);

  /// scg ended `op` at its time limit: the slot is free, and a reattach is
  /// told so until the entry expires.
  void kill(const std::string& op, ms now);

  /// Forgets operations detached (or killed) since before `now - ttl`; how many.
  std::size_t expire(ms now, ms ttl);

  /// Operations that still run: a stream attached now, or detached since
  /// `quiet_since` or later (a reattach is likely); not those scg ended.
  std::vector<std::string> live_ops(ms quiet_since) const;

  /// Slots of `tenant` in use (calls and operations).
  int in_use(const std::string& tenant) const;
  /// Operations known.
  std::size_t size() const;

 private:
  struct operation {
    std::string tenant;
    ms started = 0;
    int streams = 0;        // attached now
    ms detached_since = 0;  // when the last stream left; 0 while attached
    bool holds_slot = false;
    bool killed = false;
    bool waiting = false;   // no slot, no time limit (adopt_waiting)
  };
  // Called with mu_ held.
  bool take_locked(const std::string& tenant, int cap);
  void give_back_locked(const std::string& tenant);
  void release_slot(operation& o);
  void attach_stream(operation& o);  // a stream of `o` attached (not once it was killed)
  /// The entry of `op`, made for `tenant` at `started` when new (fresh).
  std::pair<operation&, bool> open_locked(const std::string& op, const std::string& tenant, ms started);

  mutable std::mutex mu_;
  std::unordered_map<std::string, int> slots_;  // per tenant
  std::unordered_map<std::string, operation> ops_;
};

}  // namespace scg::net
