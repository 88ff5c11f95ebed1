#include "admin/admin_server.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace scg::admin {
namespace {

using clock = std::chrono::steady_clock;

/// Set while the accept thread closes a connection over the cap.
thread_local bool t_refusing = false;
/// The gate the request on this thread holds, if any.
thread_local request_gate* t_held = nullptr;

void release_held() {
  if (t_held) t_held->leave();
  t_held = nullptr;
}

/// httplib's task queue, replaced: a thread per open connection, reused
/// once its connection closes, at most `cap` at once. A connection over
/// the cap is closed at once by the accept thread itself.
class connection_pool : public httplib::TaskQueue {
 public:
  explicit connection_pool(std::size_t cap) : cap_(cap) {}

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock{mutex_};
      if (busy_ < cap_) {
        ++busy_;
        jobs_.push_back(std::move(fn));
        if (jobs_.size() > idle_) threads_.emplace_back([this] { work(); });
        else ready_.notify_one();
        return;
      }
    }
    t_refusing = true;  // process_and_close_socket closes it and counts it
    fn();
    t_refusing = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock{mutex_};
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    std::unique_lock lock{mutex_};
    for (;;) {
      ++idle_;
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, nothing left
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      --busy_;
    }
  }

  const std::size_t cap_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // grows to the most connections open at once, then stays
  std::size_t busy_ = 0;              // connections queued or being served
  std::size_t idle_ = 0;              // threads waiting for a connection
  bool stopping_ = false;
};

int ms_until(clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

/// One request's view of the socket: reads end at the request's deadline
/// (or at halt), writes after `write_ms` without progress.
class deadline_stream : public httplib::Stream {
 public:
  deadline_stream(socket_t sock, int wake, clock::time_point deadline, int write_ms)
      : sock_(sock), wake_(wake), deadline_(deadline), write_ms_(write_ms) {}

  bool timed_out() const { return timed_out_; }

  bool is_readable() const override { return wait(POLLIN, ms_until(deadline_), true) > 0; }
  bool is_writable() const override { return wait(POLLOUT, write_ms_, false) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (wait(POLLIN, ms_until(deadline_), true) <= 0) return -1;
    ssize_t n;
    do n = ::recv(sock_, ptr, size, 0);
    while (n < 0 && errno == EINTR);
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (wait(POLLOUT, write_ms_, false) <= 0) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  /// 1 ready, 0 timed out, -1 halted or failed.
  int wait(short events, int ms, bool reading) const {
    pollfd fds[2] = {{sock_, events, 0}, {wake_, POLLIN, 0}};
    int r;
    do r = ::poll(fds, 2, ms);
    while (r < 0 && errno == EINTR);
    if (r < 0 || fds[1].revents) return -1;
    if (r == 0) {
      if (reading) timed_out_ = true;
      return 0;
    }
    return 1;
  }

  void address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if ((peer ? ::getpeername(sock_, sa, &len) : ::getsockname(sock_, sa, &len)) != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return;
    ip = host;
    port = std::atoi(serv);
  }

  socket_t sock_;
  int wake_;
  clock::time_point deadline_;
  int write_ms_;
  mutable bool timed_out_ = false;
};

}  // namespace

admin_counters& global_admin_counters() {
  static admin_counters c;
  return c;
}

void hold_for_request(request_gate& gate) {
  release_held();
  t_held = &gate;
}

bounded_server::bounded_server(listener_limits limits, listener_stats& stats) : limits_(limits), stats_(stats) {
  if (::pipe(wake_) != 0) wake_[0] = wake_[1] = -1;
  new_task_queue = [cap = limits_.max_connections] { return new connection_pool(static_cast<std::size_t>(cap)); };
  set_write_timeout(limits_.request_timeout_ms / 1000, (limits_.request_timeout_ms % 1000) * 1000);
  set_read_timeout(limits_.request_timeout_ms / 1000, (limits_.request_timeout_ms % 1000) * 1000);
  // What the Keep-Alive header tells clients: this loop's own bounds.
  set_keep_alive_max_count(static_cast<std::size_t>(limits_.max_requests_per_connection));
  set_keep_alive_timeout(std::max(1, limits_.idle_timeout_ms / 1000));
  // Admin requests carry no body worth more (drain and undrain carry none).
  set_payload_max_length(64 * 1024);
}

bounded_server::~bounded_server() {
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

int bounded_server::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  // cpp-httplib listens with a backlog of 5: a burst of connections would
  // wait for SYN retransmits (a second and more) before the accept loop
  // sees them. Listening again only changes the backlog.
  if (bound > 0) ::listen(svr_sock_, limits_.max_connections);
  return bound;
}

void bounded_server::halt() {
  if (wake_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &byte, 1);
  }
  // stop() does nothing before the accept loop runs: wait for it (bounded).
  for (int i = 0; i < 2000 && !is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop();
}

int bounded_server::wait_for_request(socket_t sock, int ms) const {
  pollfd fds[2] = {{sock, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  int r;
  do r = ::poll(fds, 2, ms);
  while (r < 0 && errno == EINTR);
  if (r < 0 || fds[1].revents) return -1;
  return r == 0 ? 0 : 1;
}

bool bounded_server::process_and_close_socket(socket_t sock) {
  if (t_refusing) {
    stats_.refused.fetch_add(1, std::memory_order_relaxed);
    ::close(sock);
    return false;
  }
  stats_.accepted.fetch_add(1, std::memory_order_relaxed);
  stats_.open.fetch_add(1, std::memory_order_relaxed);
  bool ok = true;
  for (int n = 0; n < limits_.max_requests_per_connection && svr_sock_ != INVALID_SOCKET; ++n) {
    const int w = wait_for_request(sock, limits_.idle_timeout_ms);
    if (w == 0) stats_.idle_closed.fetch_add(1, std::memory_order_relaxed);
    if (w <= 0) break;
    deadline_stream strm(sock, wake_[0], clock::now() + std::chrono::milliseconds(limits_.request_timeout_ms),
                         limits_.request_timeout_ms);
    bool closed = false;
    ok = process_request(strm, n + 1 == limits_.max_requests_per_connection, closed, nullptr);
    release_held();
    if (strm.timed_out()) {
      stats_.request_timeouts.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    if (!ok || closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  stats_.open.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

}  // namespace scg::admin
