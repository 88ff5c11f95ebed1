#pragma once
// A TCP reachability check that never blocks: start() sends a SYN (a
// non-blocking connect), poll() later says whether the handshake completed.
// The cluster dials a peer through CAF's middleman only once a probe found
// its port open: a connect begun during a partition waits for the kernel's
// SYN retransmissions (1 s, then 3 s, ...) after the heal, while a probe that
// is still pending at the next dial round is simply started again (and
// looked at every 25 ms until then), so a healed link is dialed within about
// one round.

#include <cstdint>
#include <optional>
#include <string>

namespace scg::cluster {

class reach_probe {
 public:
  /// refused: the host answered that nothing listens there (retried after a
  /// backoff); unreachable: no route, or the host did not answer (a
  /// partition, a peer gone): probed again at the next round, as a lost SYN.
  enum class state { pending, open, refused, unreachable };

  /// What a connect that ended with `err` (0: it connected) says.
  static state state_of(int err);

  /// A probe of `ip`:`port` under way; nullopt when `ip` is not an IPv4 or
  /// IPv6 literal (a name is dialed without a probe) or no socket could be made.
  static std::optional<reach_probe> start(const std::string& ip, std::uint16_t port);

  /// Where the handshake stands now (never waits). Once open or refused it
  /// stays so; the socket is closed then.
  state poll();

  reach_probe(reach_probe&& other) noexcept : fd_(other.fd_), done_(other.done_) { other.fd_ = -1; }
  reach_probe& operator=(reach_probe&& other) noexcept;
  reach_probe(const reach_probe&) = delete;
  reach_probe& operator=(const reach_probe&) = delete;
  ~reach_probe();

 private:
  explicit reach_probe(int fd) : fd_(fd) {}
  void close_fd();
  int fd_ = -1;
  std::optional<state> done_;
};

}  // namespace scg::cluster
