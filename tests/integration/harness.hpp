#pragma once
// Test harness: real scg and scg-fake-spark processes on loopback, cleaned up
// by pid; raw and typed gRPC clients.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "spark_connect.grpc.pb.h"

namespace scg::test {

using namespace std::chrono_literals;

/// Path of a built binary (scg, scg-fake-spark).
std::string bin(const std::string& name);

/// A fresh directory under /tmp, removed with its contents at destruction.
class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Writes `text` to a file in the directory and returns its path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

/// A child process; SIGKILLed and reaped at destruction unless already gone.
class process {
 public:
  /// Starts `argv` with stdout and stderr appended to `log_path`.
  process(const std::vector<std::string>& argv, const std::string& log_path);
  ~process();
  process(process&& other) noexcept;
  process(const process&) = delete;
  process& operator=(const process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  /// Waits up to `timeout` for exit; the exit code, or nullopt on time-out
  /// (or -signal when killed by a signal).
  std::optional<int> wait(std::chrono::milliseconds timeout);
  /// Resident set size in KiB, from /proc.
  long rss_kib() const;
  const std::string& log_path() const { return log_; }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

/// Waits up to `timeout` for a JSON file written by a child (--port-file).
nlohmann::json wait_for_json_file(const std::string& path, std::chrono::milliseconds timeout);

/// A running scg-fake-spark.
struct fake_spark {
  std::string name;
  process proc;
  int grpc_port;
  int ui_port;
  std::string host = "127.0.0.1";
  std::string address() const { return host + ":" + std::to_string(grpc_port); }
};

/// Starts scg-fake-spark NAME on free ports of `host`, with extra CLI flags;
/// `wrapper` prefixes the command (e.g. {"ip", "netns", "exec", NS}).
fake_spark start_fake(const temp_dir& dir, const std::string& name,
                      const std::vector<std::string>& extra = {}, const std::string& host = "127.0.0.1",
                      const std::vector<std::string>& wrapper = {});

/// A running scg replica.
struct gateway {
  process proc;
  int grpc_port;
  int admin_port;
  int cluster_port;  ///< 0 without a cluster block
  int probe_port = 0;  ///< admin.probe_addr's; 0 without one
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port); }
};

/// The YAML of a gateway on free ports of `host` in front of `backends`,
/// followed by `extra` YAML lines.
std::string gateway_yaml(const std::vector<const fake_spark*>& backends,
                         const std::string& extra = "", const std::string& host = "127.0.0.1");

/// The admin block that opens this build's admin plane to anyone on loopback
/// (a test that writes and runs its config itself appends it).
inline const std::string open_admin_yaml = "admin: { allow_unauthenticated: true }\n";

/// Starts scg with config `yaml`; `wrapper` prefixes the command; `program`
/// is the scg binary to run (this build's when empty). A yaml run by this
/// build (program empty or bin("scg")) without an `admin:` block gets `admin: { allow_unauthenticated: true }`.
gateway start_gateway(const temp_dir& dir, const std::string& yaml, const std::string& tag = "scg",
                      const std::vector<std::string>& wrapper = {}, const std::string& program = "");

/// A loopback TCP port free a moment ago, for a config that names its ports.
int unused_port();

/// While it lives, http_get, http_get_at, http_post and metric_value (and
/// cluster_env's waits) send `Authorization: Bearer TOKEN`: for replicas
/// whose admin plane has token files.
struct admin_token_scope {
  explicit admin_token_scope(std::string token);
  ~admin_token_scope();
  admin_token_scope(const admin_token_scope&) = delete;
  admin_token_scope& operator=(const admin_token_scope&) = delete;
};

/// HTTP GET on loopback; {status, body}, status -1 when it failed.
std::pair<int, std::string> http_get(int port, const std::string& path);

/// A wrapper for start_gateway that runs scg with hidden test-only `flags`
/// (app/main.cpp: --test-flush-delay-ms, --test-cluster-protocol; no
/// contract) after the harness's own arguments; it execs, so the pid is scg's.
std::vector<std::string> scg_with_flags(const std::string& flags);

/// The backend gateway `g`'s /api/v1/sessions lists for `session`: empty
/// when none, "?" when the listing could not be read.
std::string listed_backend(const gateway& g, const std::string& session);

/// HTTP GET on `host` (a test namespace's address); as http_get.
std::pair<int, std::string> http_get_at(const std::string& host, int port, const std::string& path);

/// HTTP POST of a JSON body on loopback; {status, body}.
std::pair<int, std::string> http_post(int port, const std::string& path, const std::string& body);

/// A channel to host:port (loopback by default) with 256 MiB message limits.
std::shared_ptr<grpc::Channel> channel_to(int port, const std::string& host = "127.0.0.1");

/// A typed Spark Connect stub.
std::unique_ptr<spark::connect::SparkConnectService::Stub> stub_to(int port,
                                                                   const std::string& host = "127.0.0.1");

/// The outcome of a call made with raw bytes.
struct raw_result {
  grpc::Status status;
  std::multimap<std::string, std::string> initial;
  std::multimap<std::string, std::string> trailing;
  std::vector<std::string> responses;
};

/// How a raw_stream runs.
struct raw_options {
  std::map<std::string, std::string> metadata;
  std::chrono::milliseconds timeout = std::chrono::seconds(10);
  grpc_compression_algorithm compression = GRPC_COMPRESS_NONE;
  bool read_later = false;  ///< no read until begin_reading() (a slow reader)
};

/// A bidi call of `method` with raw message bytes: writes every request,
/// then half-closes, and reads until the end. A stream not done when it is
/// destroyed is cancelled and awaited.
class raw_stream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  raw_stream(grpc::GenericStub& stub, const std::string& method, const std::vector<std::string>& requests,
             const raw_options& o);
  ~raw_stream() override;
  /// Starts reading (with read_later), pausing `pause` after each message.
  void begin_reading(std::chrono::milliseconds pause = std::chrono::milliseconds(0));
  /// Everything that came back, once the call is done.
  raw_result get();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;

 private:
  void write_next();
  grpc::ClientContext ctx_;
  std::vector<grpc::ByteBuffer> requests_;
  std::size_t next_ = 0;
  grpc::ByteBuffer in_;
  raw_result result_;
  std::promise<void> done_;
  std::future<void> done_future_;
  std::chrono::milliseconds read_pause_{0};
};

/// Sends `requests` (serialized bytes) on `method` as a bidi stream and
/// collects everything that comes back; bounded by `timeout`.
raw_result call_raw(grpc::Channel& channel, const std::string& method,
                    const std::vector<std::string>& requests,
                    const std::map<std::string, std::string>& metadata = {},
                    std::chrono::milliseconds timeout = 10s);

/// The first value of `key` in `md`, empty when absent.
std::string header(const std::multimap<std::string, std::string>& md, const std::string& key);

/// The first value of a server metadata `key` in a ClientContext, empty when absent.
std::string header(const grpc::ClientContext& ctx, const std::string& key, bool trailing = false);

/// The value of a Prometheus series (e.g. "scg_sessions_active") from the
/// admin endpoint at host:port; -1 when absent.
long metric_value(int admin_port, const std::string& series, const std::string& host = "127.0.0.1");

/// How often `what` occurs in `text` (log lines of one event, say).
std::size_t occurrences(const std::string& text, const std::string& what);

/// The whole of the file at `path` (a process's log, say); empty when it cannot be read.
std::string read_file(const std::string& path);

/// One Config for (`user`, `session`) through the gateway at host:port: the
/// backend that answered (x-fake-backend), empty when the call failed.
std::string backend_for_session(int port, const std::string& session, const std::string& user,
                                grpc::Status* status = nullptr, const std::string& host = "127.0.0.1");

/// A value a test waits on, with the name a failure's log gives it; compared
/// with what the test wants (==, !=, <, <=, >, >=) it is a condition for
/// eventually() that remembers the last value it read:
/// `CHECK(eventually(watch("members up", [&] { return up_members(port); }) == 2, 5s))`.
template <class F>
struct watched {
  std::string name;
  F value;
};

template <class F>
watched<F> watch(std::string name, F value) {
  return {std::move(name), std::move(value)};
}

/// A Prometheus series of the admin endpoint at host:port to wait on (-1
/// while absent): `CHECK(eventually(metric(port, "scg_x_total") >= 1, 5s))`.
inline auto metric(int admin_port, const std::string& series, const std::string& host = "127.0.0.1") {
  return watch(series, [admin_port, series, host] { return metric_value(admin_port, series, host); });
}

/// `v` as a failure's log shows it: text quoted (so an empty one shows).
template <class T>
std::string shown(const T& v) {
  std::ostringstream text;
  if constexpr (std::is_convertible_v<const T&, std::string_view>)
    text << '\'' << v << '\'';
  else
    text << v;
  return text.str();
}

/// A watched value compared with the one wanted (see watched).
template <class F, class V, class Compare>
struct watched_condition {
  watched<F> w;
  V wanted;
  const char* op;
  std::string last = "never read";

  bool operator()() {
    const auto v = w.value();
    last = shown(v);
    return Compare{}(v, wanted);
  }
  /// What the failure's log says: the last value seen and the one wanted.
  std::string describe() const { return w.name + " was " + last + ", wanted " + op + " " + shown(wanted); }
};

#define SCG_WATCHED_COMPARISON(OP, COMPARE)                                      \
  template <class F, class V>                                                    \
  watched_condition<F, V, COMPARE> operator OP(watched<F> w, V wanted) {         \
    return {std::move(w), std::move(wanted), #OP};                               \
  }
SCG_WATCHED_COMPARISON(==, std::equal_to<>)
SCG_WATCHED_COMPARISON(!=, std::not_equal_to<>)
SCG_WATCHED_COMPARISON(<, std::less<>)
SCG_WATCHED_COMPARISON(<=, std::less_equal<>)
SCG_WATCHED_COMPARISON(>, std::greater<>)
SCG_WATCHED_COMPARISON(>=, std::greater_equal<>)
#undef SCG_WATCHED_COMPARISON

/// Adds `what` to the log of the test's next assertion (Catch2's
/// UNSCOPED_INFO): eventually()'s last value when its wait ran out.
void note_wait_ended(const std::string& what, std::chrono::milliseconds timeout);

template <class F, class = void>
struct describes_itself : std::false_type {};
template <class F>
struct describes_itself<F, std::void_t<decltype(std::declval<const F&>().describe())>> : std::true_type {};

/// Polls `ok` every 50 ms until it holds or `timeout` passes; its last
/// answer. When `ok` is a watched value compared (watch(), metric()) and
/// the wait runs out, the assertion around it says the last value seen.
template <class F>
bool eventually(F ok, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!ok()) {
    if (std::chrono::steady_clock::now() >= until) {
      if constexpr (describes_itself<F>::value) note_wait_ended(ok.describe(), timeout);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the poll interval
  }
  return true;
}

/// Polls `value` every 50 ms until it has not changed for `steady_for` (a
/// flow that backed up, a buffer that filled); false when it still moves
/// after `timeout`.
template <class F>
bool settles(F value, std::chrono::milliseconds steady_for, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto last = value();
  auto since = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the poll interval
    const auto now = std::chrono::steady_clock::now();
    const auto v = value();
    if (v != last) {
      last = v;
      since = now;
    } else if (now - since >= steady_for) {
      return true;
    }
    if (now >= until) return false;
  }
}

/// The exit code ctest reads as a skip (SKIP_RETURN_CODE in CMakeLists.txt).
constexpr int skip_code = 77;

/// For a test that cannot run here (a tool or capability is missing): says
/// why, and when this run was asked for this one test (as ctest runs each)
/// ends the binary with skip_code, so ctest counts it as not run rather than
/// passed. Call it before the test starts any process: the exit unwinds
/// nothing. In a run of several tests it only warns, and the caller returns.
void skip_test(const std::string& reason);

/// The YAML `cluster:` block of replica `node` on loopback, seeded with
/// `seed_ports`.
std::string cluster_block(const std::string& node, const std::vector<int>& seed_ports);

/// Backends fake-a, fake-b, fake-c and replicas scg-0, scg-1, … on loopback:
/// replica 0 first, the others seeded from it. The constructor returns once
/// the mesh is complete (a failed REQUIRE otherwise).
struct cluster_env {
  temp_dir dir;
  std::vector<fake_spark> fakes;
  std::vector<std::unique_ptr<gateway>> replicas;
  std::string extra_yaml;

  explicit cluster_env(int n_replicas, std::string extra = "");

  /// Starts the next replica, seeded with `seeds`.
  gateway& add_replica(const std::vector<int>& seeds);

  /// Waits up to `timeout` until every live replica sees every other live one
  /// up and is ready; on time-out adds what each one sees to the test's log.
  bool wait_for_mesh(std::chrono::milliseconds timeout);
};

/// Runs a shell command quietly; true when it exited 0.
bool sh(const std::string& cmd);

/// Runs a shell command; what it wrote to stdout (stderr discarded).
std::string sh_out(const std::string& cmd);

/// The value of `series` in a Prometheus text (a /metrics body); -1 when absent.
long series_value(const std::string& metrics_text, const std::string& series);

/// What a test's network namespaces may be named and addressed with, free on
/// this host: chosen while holding a lock on /tmp/scg-netns.lock, which the
/// claim keeps until it is destroyed, so the test creates its namespaces and
/// addresses under it and tests running at once (ctest -j) never pick the
/// same. `id`: no namespace and no link of the root namespace is named
/// PREFIX+id (or PREFIX+id followed by a non-digit) for any of `prefixes`,
/// so a namespace a crashed run left behind is stepped around. `octet`: no
/// address of the root namespace is in 10.S.octet.0/24 for any S of
/// `second_octets` (each test keeps one address of its range in the root
/// namespace while it runs, and a crashed run leaves its link there).
class netns_claim {
 public:
  netns_claim(const std::vector<std::string>& prefixes, const std::vector<int>& second_octets);
  ~netns_claim();
  netns_claim(const netns_claim&) = delete;
  netns_claim& operator=(const netns_claim&) = delete;
  /// False when no free id or octet was found (or the lock could not be taken).
  bool ok() const { return ok_; }
  const std::string& id() const { return id_; }
  const std::string& octet() const { return octet_; }

 private:
  int lock_fd_ = -1;
  std::string id_, octet_;
  bool ok_ = false;
};

/// A namespace joined to this one by a veth pair: the test's own two hosts.
/// Addresses are the pair's own /30 in 10.251.X.0/24, X and the names
/// claimed free (netns_claim). `cut` takes the host's end down: packets
/// between them vanish, nobody sees a reset.
class netns_link {
 public:
  netns_link();
  ~netns_link();
  netns_link(const netns_link&) = delete;
  netns_link& operator=(const netns_link&) = delete;
  bool ok() const { return ok_; }
  void cut();
  void heal();
  /// The command prefix that runs a program inside the namespace.
  std::vector<std::string> inside() const;
  const std::string& host_ip() const { return host_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }

 private:
  std::string ns_, host_if_, ns_if_, host_ip_, ns_ip_;
  bool ok_ = false;
};

/// A user context with `user`.
spark::connect::UserContext user(const std::string& id);

/// A valid, version-4-shaped UUID derived from `name` alone: the same name
/// gives the same id in every process, so a test writes uuid_of("kill-0")
/// where Spark (and the fake) require a UUID for a session or operation id.
std::string uuid_of(std::string_view name);

/// A fresh random version-4 UUID.
std::string random_uuid();

/// AddArtifactsRequest.batch as Spark reads it: one SingleChunkArtifact per
/// (name, data), each with its data's CRC-32.
std::string artifact_batch(const std::vector<std::pair<std::string, std::string>>& artifacts);

/// Whether an ExecutePlan asks for a reattachable execution.
enum class reattachable : bool { no = false, yes = true };

/// An ExecutePlan of `session` by `user_id` (operation id `op_id` when given),
/// reattachable unless asked otherwise: PySpark's default request_options.
spark::connect::ExecutePlanRequest execute(const std::string& session, const std::string& user_id,
                                           const std::string& op_id = "",
                                           reattachable mode = reattachable::yes);

/// How an ExecutePlan read to its end went.
struct stream_result {
  grpc::Status status;
  std::string backend;  ///< x-fake-backend (header or trailer)
  int responses = 0;
  bool complete = false;  ///< the last response was result_complete
};

/// One ExecutePlan read to its end (bounded by a 30 s deadline), with metadata `md`.
stream_result execute_plan(spark::connect::SparkConnectService::Stub& stub,
                           const spark::connect::ExecutePlanRequest& req,
                           const std::map<std::string, std::string>& md = {},
                           grpc_compression_algorithm algo = GRPC_COMPRESS_NONE);

/// A ReattachExecute of operation `op_id`, after response `last` when given.
spark::connect::ReattachExecuteRequest reattach(const std::string& session, const std::string& user_id,
                                                const std::string& op_id, const std::string& last);

}  // namespace scg::test
