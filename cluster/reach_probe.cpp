#include "cluster/reach_probe.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace scg::cluster {

std::optional<reach_probe> reach_probe::start(const std::string& ip, std::uint16_t port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  const std::string bare = ip.size() > 2 && ip.front() == '[' && ip.back() == ']' ? ip.substr(1, ip.size() - 2) : ip;
  if (::inet_pton(AF_INET, bare.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, bare.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    return std::nullopt;
  }
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  reach_probe p{fd};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    p.done_ = state::open;
    p.close_fd();
  } else if (errno != EINPROGRESS) {
    p.done_ = state_of(errno);
    p.close_fd();
  }
  return p;
}

reach_probe::state reach_probe::state_of(int err) {
  switch (err) {
    case 0: return state::open;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ETIMEDOUT: return state::unreachable;
    default: return state::refused;
  }
}

reach_probe::state reach_probe::poll() {
  if (done_) return *done_;
  pollfd pfd{fd_, POLLOUT, 0};
  if (::poll(&pfd, 1, 0) <= 0) return state::pending;
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  done_ = state_of(err);
  close_fd();
  return *done_;
}

reach_probe& reach_probe::operator=(reach_probe&& other) noexcept {
  if (this != &other) {
    close_fd();
    fd_ = other.fd_;
    done_ = other.done_;
    other.fd_ = -1;
  }
  return *this;
}

reach_probe::~reach_probe() { close_fd(); }

void reach_probe::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace scg::cluster
