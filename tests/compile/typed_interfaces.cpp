// The actors' typed interfaces (actors/protocol.hpp) at work: ctest compiles
// this file as is (it must compile) and with SCG_WRONG_MESSAGE defined (it
// must not: each case sends an actor a message outside its interface).
#include "actors/protocol.hpp"

namespace scg::actors {

void sends(const router_actor& router, const session_actor& session, const backend_actor& backend,
           const load_poller_actor& poller) {
  caf::anon_send(router, op_atom::value, std::string("key"), std::string("op"));
  caf::anon_send(session, op_atom::value, std::string("op"));
  caf::anon_send(backend, probed_atom::value, true);
  caf::anon_send(poller, tick_atom::value);
#if SCG_WRONG_MESSAGE == 1
  caf::anon_send(backend, op_atom::value, std::string("op"));  // a session's message, to a backend actor
#elif SCG_WRONG_MESSAGE == 2
  caf::anon_send(router, probe_atom::value, true);  // probe_atom has no argument; the outcome is probed_atom
#elif SCG_WRONG_MESSAGE == 3
  caf::anon_send(session, op_atom::value, std::string("key"), std::string("op"));  // the router's shape
#endif
}

}  // namespace scg::actors
