#pragma once
// Replay (on_backend_lost.action: replay, docs/replay.md) as one call sees
// it. forward_call (net/forwarder.cpp) calls it at its named points:
//
//   first message   call_journal::first_message: what the request means for
//                   its session's journal (net/session_journal.hpp)
//   routing         replay_session: the session's server was lost and the
//                   router has moved it; its journal is run on the new
//                   server (net/replayer.hpp) before the call goes on
//   backend stream  call_journal::translate_first: a replayed session's ids
//                   are translated: the client's observed id into its new
//                   server's in requests, the server's back into the one the
//                   client first observed in responses, in place
//   request stream  call_journal::spool: AddArtifacts' messages are written
//                   to the spool (net/artifact_spool.hpp) as they pass
//   end             call_journal::on_success: the request joins the journal
//                   (only once it succeeded); ReleaseSession drops it
//
// A session that was never replayed costs one atomic load per call, and a
// request that changes nothing costs the read of its command's kind.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/artifact_spool.hpp"
#include "net/call_policies.hpp"
#include "net/session_journal.hpp"

namespace scg::net {

class call_journal {
 public:
  /// At the first message (after the user rewrite, once the session's key
  /// is known): the request's verdict, and its journal form when it is to be
  /// recorded. An AddArtifacts call starts spooling.
  void first_message(const forward_context& fx, const call_facts& facts, message_reader& body);
  /// AddArtifacts: its request messages are written to the spool as they pass (read whole).
  bool spooling() const { return writer_ != nullptr; }
  void spool(message_reader& body);
  /// The backend answered OK.
  void on_success(const forward_context& fx, const call_facts& facts);
  /// The call ended with another status (or none): an ExecutePlan that
  /// would be recorded waits for a ReattachExecute of its operation that
  /// ends OK (its stream may just have broken).
  void on_failure(const forward_context& fx, const call_facts& facts);

  /// As the backend stream starts: when the session was replayed, turns
  /// translation on and writes its server's id into the first message.
  void translate_first(const forward_context& fx, const call_facts& facts, held_message* first);
  bool translating() const { return ids_.has_value(); }
  /// A later request message (AddArtifacts' stream) carries the server's id.
  void request(rpc kind, held_message& msg) const;
  /// A response carries the id the client first observed.
  void response(rpc kind, held_message& msg) const;

 private:
  journal_verdict verdict_;
  std::string request_;  // journal_form, for record and forget
  std::optional<session_ids> ids_;
  std::unique_ptr<artifact_spool::writer> writer_;  // AddArtifacts of a replayable session
  std::vector<std::string> artifacts_;               // the names it adds
};

/// The session of `facts` moved from its lost backend `lost` to `to`: opens
/// it there and replays its journal, unless a replay of it is under way (its
/// end is awaited) or it was replayed there already. `done` gets nullopt
/// when the call may go on to `to`, else what the client is told (the
/// session then goes on at `to` unreplayed, as with rebind). It is called
/// once, on any thread.
void replay_session(forward_context& fx, const call_facts& facts, actors::backend_index lost, actors::backend_index to,
                    std::function<void(std::optional<refusal>)> done);

}  // namespace scg::net
