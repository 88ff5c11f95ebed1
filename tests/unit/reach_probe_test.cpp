// The reachability probe the cluster dials behind (cluster/reach_probe.hpp):
// it never blocks, tells an open port from a closed one, and skips names.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "cluster/reach_probe.hpp"

using scg::cluster::reach_probe;

namespace {

/// A listening loopback socket on a free port (closed by the destructor).
struct listener {
  int fd = -1;
  std::uint16_t port = 0;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~listener() { ::close(fd); }
};

/// Polls `p` until it is no longer pending, for at most a second.
reach_probe::state settle(reach_probe& p) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto s = p.poll();
  while (s == reach_probe::state::pending && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s = p.poll();
  }
  return s;
}

}  // namespace

TEST_CASE("a probe finds a listening port open and a closed one refused", "[cluster][reach_probe]") {
  std::uint16_t closed_port = 0;
  {
    listener l;
    auto open = reach_probe::start("127.0.0.1", l.port);
    REQUIRE(open);
    CHECK(settle(*open) == reach_probe::state::open);
    CHECK(open->poll() == reach_probe::state::open);  // it stays so
    closed_port = l.port;
  }
  auto refused = reach_probe::start("127.0.0.1", closed_port);
  REQUIRE(refused);
  CHECK(settle(*refused) == reach_probe::state::refused);
}

TEST_CASE("a probe takes IP literals only and moves without closing twice", "[cluster][reach_probe]") {
  CHECK_FALSE(reach_probe::start("scg-1.scg-peers", 7400));
  CHECK_FALSE(reach_probe::start("", 7400));
  listener l;
  auto v6 = reach_probe::start("[::1]", l.port);  // a v6 literal in brackets parses (the port is v4-only here)
  REQUIRE(v6);
  auto p = reach_probe::start("127.0.0.1", l.port);
  REQUIRE(p);
  reach_probe moved = std::move(*p);
  CHECK(settle(moved) == reach_probe::state::open);
  moved = std::move(*v6);  // closes the first socket, takes the second
  CHECK(settle(moved) != reach_probe::state::pending);
}

TEST_CASE("a connect's error tells a closed port (backoff) from a host not reached (probed again at once)",
          "[cluster][reach_probe]") {
  using state = reach_probe::state;
  CHECK(reach_probe::state_of(0) == state::open);
  CHECK(reach_probe::state_of(ECONNREFUSED) == state::refused);
  // A partition: the neighbour's address no longer resolves, or no route, or no answer.
  CHECK(reach_probe::state_of(EHOSTUNREACH) == state::unreachable);
  CHECK(reach_probe::state_of(ENETUNREACH) == state::unreachable);
  CHECK(reach_probe::state_of(ETIMEDOUT) == state::unreachable);
  CHECK(reach_probe::state_of(EACCES) == state::refused);  // anything else: as a refusal
}
