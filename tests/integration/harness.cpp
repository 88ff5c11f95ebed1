#include "tests/integration/harness.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/ids.hpp"
#include "core/protowire.hpp"
#include "core/rendezvous.hpp"

namespace scg::test {

namespace fs = std::filesystem;

std::string bin(const std::string& name) { return std::string(SCG_BIN_DIR) + "/" + name; }

temp_dir::temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "scg-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  // SCG_TEST_KEEP=1 keeps every test's directory (configs, logs) for a look after.
  if (const char* keep = std::getenv("SCG_TEST_KEEP"); keep && std::string(keep) == "1") return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string temp_dir::write(const std::string& name, const std::string& text) const {
  auto p = file(name);
  std::ofstream(p) << text;
  return p;
}

process::process(const std::vector<std::string>& argv, const std::string& log_path) : log_(log_path) {
  // Everything the child needs is allocated before the fork: the child of a
  // threaded parent may not allocate (another thread can hold the allocator's
  // lock at the fork, and the child would hang before exec: seen under ASan).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A child forked by the main thread dies with the test process, even one
  // killed by ctest's timeout (the kernel ties this to the forking thread, so
  // children of other threads, which may end first, are left to the destructor).
  const pid_t parent = getpid();
  const bool main_thread = static_cast<pid_t>(syscall(SYS_gettid)) == parent;
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    if (main_thread) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the test ended before the prctl
    }
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    // Unblock signals the test runner may have blocked.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

process::process(process&& other) noexcept : pid_(other.pid_), log_(std::move(other.log_)) {
  other.pid_ = -1;
}

process::~process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void process::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

std::optional<int> process::wait(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(20ms);  // the poll interval
  }
  return std::nullopt;
}

long process::rss_kib() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

nlohmann::json wait_for_json_file(const std::string& path, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(path);
    if (in) {
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded()) return j;
    }
    std::this_thread::sleep_for(20ms);  // the poll interval
  }
  throw std::runtime_error("timed out waiting for " + path);
}

fake_spark start_fake(const temp_dir& dir, const std::string& name,
                      const std::vector<std::string>& extra, const std::string& host,
                      const std::vector<std::string>& wrapper) {
  const std::string tag = name + (host == "127.0.0.1" ? "" : "@" + host);
  auto port_file = dir.file(tag + ".ports");
  std::vector<std::string> argv = wrapper;
  for (const auto& a : {bin("scg-fake-spark"), std::string("--listen"), host + ":0", std::string("--ui-listen"),
                        host + ":0", std::string("--name"), name, std::string("--port-file"), port_file})
    argv.push_back(a);
  argv.insert(argv.end(), extra.begin(), extra.end());
  process p{argv, dir.file(tag + ".log")};
  auto ports = wait_for_json_file(port_file, 10s);
  return {name, std::move(p), ports.at("grpc").get<int>(), ports.at("ui").get<int>(), host};
}

std::string gateway_yaml(const std::vector<const fake_spark*>& backends, const std::string& extra,
                         const std::string& host) {
  std::ostringstream y;
  y << "bind_addr: \"" << host << ":0\"\nadmin_addr: \"" << host << ":0\"\nbackends:\n";
  for (const auto* b : backends)
    y << "  - { name: " << b->name << ", address: \"" << b->address() << "\", ui_url: \"http://"
      << b->host << ":" << b->ui_port << "\" }\n";
  y << "logging: { level: info }\n" << extra;
  return y.str();
}

gateway start_gateway(const temp_dir& dir, const std::string& yaml, const std::string& tag,
                      const std::vector<std::string>& wrapper, const std::string& program) {
  // This build refuses admin listings and changes without a token; tests
  // that do not test the admin plane's access run it open, as on a laptop.
  // (An older binary, `program`, has no admin: block.)
  const bool has_admin_block = yaml.rfind("admin:", 0) == 0 || yaml.find("\nadmin:") != std::string::npos;
  const bool this_build = program.empty() || program == bin("scg");
  auto cfg = dir.write(tag + ".yaml", this_build && !has_admin_block
                                          ? yaml + "\n" + open_admin_yaml
                                          : yaml);
  auto port_file = dir.file(tag + ".ports");
  std::vector<std::string> argv = wrapper;
  for (const auto& a : {program.empty() ? bin("scg") : program, std::string("--config"), cfg,
                        std::string("--port-file"), port_file})
    argv.push_back(a);
  process p{argv, dir.file(tag + ".log")};
  auto ports = wait_for_json_file(port_file, 10s);
  return {std::move(p), ports.at("grpc").get<int>(), ports.at("admin").get<int>(),
          ports.value("cluster", 0), ports.value("probe", 0)};
}

int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::pair<int, std::string> http_get(int port, const std::string& path) {
  return http_get_at("127.0.0.1", port, path);
}

namespace {
std::string admin_bearer;  // admin_token_scope's
}  // namespace

admin_token_scope::admin_token_scope(std::string token) { admin_bearer = std::move(token); }
admin_token_scope::~admin_token_scope() { admin_bearer.clear(); }

std::vector<std::string> scg_with_flags(const std::string& flags) {
  return {"/bin/sh", "-c", "exec \"$0\" \"$@\" " + flags};
}

std::string listed_backend(const gateway& g, const std::string& session) {
  auto [code, body] = http_get(g.admin_port, "/api/v1/sessions?session=" + session);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (code != 200 || j.is_discarded()) return "?";
  for (const auto& s : j["sessions"])
    if (s["session_id"] == session) return s["backend"].get<std::string>();
  return "";
}

std::pair<int, std::string> http_get_at(const std::string& host, int port, const std::string& path) {
  httplib::Client c(host, port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  if (!admin_bearer.empty()) c.set_bearer_token_auth(admin_bearer);
  auto r = c.Get(path.c_str());
  if (!r) return {-1, ""};
  return {r->status, r->body};
}

std::pair<int, std::string> http_post(int port, const std::string& path, const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  if (!admin_bearer.empty()) c.set_bearer_token_auth(admin_bearer);
  auto r = c.Post(path.c_str(), body, "application/json");
  if (!r) return {-1, ""};
  return {r->status, r->body};
}

std::shared_ptr<grpc::Channel> channel_to(int port, const std::string& host) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // A private connection per channel, so tests measure what they mean to.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(host + ":" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<spark::connect::SparkConnectService::Stub> stub_to(int port, const std::string& host) {
  return spark::connect::SparkConnectService::NewStub(channel_to(port, host));
}

namespace {

std::multimap<std::string, std::string> copy_md(
    const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
  std::multimap<std::string, std::string> out;
  for (const auto& [k, v] : md) out.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
  return out;
}

}  // namespace

raw_stream::raw_stream(grpc::GenericStub& stub, const std::string& method, const std::vector<std::string>& requests,
                       const raw_options& o) {
  for (const auto& r : requests) {
    grpc::Slice sl(r);
    requests_.emplace_back(&sl, 1);
  }
  for (const auto& [k, v] : o.metadata) ctx_.AddMetadata(k, v);
  if (o.compression != GRPC_COMPRESS_NONE) ctx_.set_compression_algorithm(o.compression);
  ctx_.set_deadline(std::chrono::system_clock::now() + o.timeout);
  done_future_ = done_.get_future();
  stub.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
  write_next();
  if (!o.read_later) StartRead(&in_);
  StartCall();
}

raw_stream::~raw_stream() {
  if (done_future_.wait_for(0ms) != std::future_status::ready) {
    ctx_.TryCancel();
    done_future_.wait_for(60s);
  }
}

void raw_stream::begin_reading(std::chrono::milliseconds pause) {
  read_pause_ = pause;
  StartRead(&in_);
}

raw_result raw_stream::get() {
  done_future_.wait();
  return result_;
}

void raw_stream::OnWriteDone(bool ok) {
  if (ok) write_next();
}

void raw_stream::OnReadDone(bool ok) {
  if (!ok) return;
  if (read_pause_.count() > 0) std::this_thread::sleep_for(read_pause_);  // a slow reader's pace
  std::vector<grpc::Slice> slices;
  (void)in_.Dump(&slices);
  std::string msg;
  for (const auto& sl : slices) msg.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  result_.responses.push_back(std::move(msg));
  StartRead(&in_);
}

void raw_stream::OnDone(const grpc::Status& st) {
  result_.status = st;
  result_.initial = copy_md(ctx_.GetServerInitialMetadata());
  result_.trailing = copy_md(ctx_.GetServerTrailingMetadata());
  done_.set_value();
}

void raw_stream::write_next() {
  if (next_ < requests_.size())
    StartWrite(&requests_[next_++]);
  else if (next_++ == requests_.size())
    StartWritesDone();
}

raw_result call_raw(grpc::Channel& channel, const std::string& method,
                    const std::vector<std::string>& requests,
                    const std::map<std::string, std::string>& metadata,
                    std::chrono::milliseconds timeout) {
  std::shared_ptr<grpc::Channel> ch(&channel, [](grpc::Channel*) {});
  grpc::GenericStub stub(ch);
  raw_stream call(stub, method, requests, {metadata, timeout});
  return call.get();
}

std::string header(const std::multimap<std::string, std::string>& md, const std::string& key) {
  auto it = md.find(key);
  return it == md.end() ? std::string() : it->second;
}

std::string header(const grpc::ClientContext& ctx, const std::string& key, bool trailing) {
  const auto& md = trailing ? ctx.GetServerTrailingMetadata() : ctx.GetServerInitialMetadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

long series_value(const std::string& metrics_text, const std::string& series) {
  auto pos = metrics_text.find("\n" + series + " ");
  return pos == std::string::npos ? -1 : std::stol(metrics_text.substr(pos + series.size() + 2));
}

long metric_value(int admin_port, const std::string& series, const std::string& host) {
  return series_value(http_get_at(host, admin_port, "/metrics").second, series);
}

void note_wait_ended(const std::string& what, std::chrono::milliseconds timeout) {
  UNSCOPED_INFO(what << " when the wait of " << timeout.count() << " ms ran out");
}

std::string backend_for_session(int port, const std::string& session, const std::string& user_id,
                                grpc::Status* status, const std::string& host) {
  auto stub = stub_to(port, host);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  spark::connect::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  spark::connect::ConfigResponse resp;
  auto s = stub->Config(&ctx, req, &resp);
  if (status) *status = s;
  return s.ok() ? header(ctx, "x-fake-backend") : std::string();
}

std::string cluster_block(const std::string& node, const std::vector<int>& seed_ports) {
  std::string y = "cluster:\n  node_name: " + node + "\n  bind_addr: \"127.0.0.1:0\"\n  seeds: [";
  for (std::size_t i = 0; i < seed_ports.size(); ++i)
    y += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(seed_ports[i]) + "\"";
  return y + "]\n  sync_wait_secs: 3\n";
}

cluster_env::cluster_env(int n_replicas, std::string extra) : extra_yaml(std::move(extra)) {
  for (const char* name : {"fake-a", "fake-b", "fake-c"}) fakes.push_back(start_fake(dir, name));
  for (int i = 0; i < n_replicas; ++i)
    add_replica(i == 0 ? std::vector<int>{} : std::vector<int>{replicas[0]->cluster_port});
  REQUIRE(wait_for_mesh(10s));
}

gateway& cluster_env::add_replica(const std::vector<int>& seeds) {
  std::string name = "scg-" + std::to_string(replicas.size());
  replicas.push_back(std::make_unique<gateway>(start_gateway(
      dir, gateway_yaml({&fakes[0], &fakes[1], &fakes[2]}, extra_yaml + cluster_block(name, seeds)), name)));
  return *replicas.back();
}

bool cluster_env::wait_for_mesh(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (std::chrono::steady_clock::now() >= until) {
      for (auto& r : replicas)
        if (r) UNSCOPED_INFO("readyz " << http_get(r->admin_port, "/readyz").first << " "
                                       << http_get(r->admin_port, "/api/v1/cluster").second);
      return false;
    }
    bool all = true;
    std::size_t live = 0;
    for (auto& r : replicas) live += r != nullptr;
    for (auto& r : replicas) {
      if (!r) continue;
      auto [code, body] = http_get(r->admin_port, "/api/v1/cluster");
      if (code != 200) {
        all = false;
        break;
      }
      std::size_t up = 0;
      auto view = nlohmann::json::parse(body);
      // Up, and an owner of keys there (older versions do not say): every
      // replica agrees who decides new sessions.
      for (const auto& m : view["members"])
        up += m["status"] != "down" && (!m.contains("owner") || m["owner"] == true);
      all = all && up == live && http_get(r->admin_port, "/readyz").first == 200;
    }
    if (all) return true;
    std::this_thread::sleep_for(100ms);  // the poll interval
  }
}

spark::connect::UserContext user(const std::string& id) {
  spark::connect::UserContext u;
  u.set_user_id(id);
  return u;
}

namespace {
/// 8-4-4-4-12 lowercase hex of (hi, lo) with version 4 and the RFC 4122 variant.
std::string format_uuid(std::uint64_t hi, std::uint64_t lo) {
  hi = (hi & ~0xf000ull) | 0x4000ull;
  lo = (lo & ~(0xc000ull << 48)) | (0x8000ull << 48);
  char out[37];
  std::snprintf(out, sizeof out, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffull));
  return out;
}
}  // namespace

std::string uuid_of(std::string_view name) {
  // Two independent 64-bit hashes of the name (core/rendezvous.hpp's), one per half.
  return format_uuid(core::stable_hasher{}.add(name).finish(), core::stable_hasher{}.add(std::uint64_t{1}).add(name).finish());
}

std::string random_uuid() { return core::new_uuid(); }

std::string artifact_batch(const std::vector<std::pair<std::string, std::string>>& artifacts) {
  namespace pw = core::protowire;
  std::string batch;
  for (const auto& [name, data] : artifacts) {
    std::string chunk, one;
    pw::put_bytes(chunk, 1, data);
    pw::put_uint(chunk, 2, ::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    pw::put_bytes(one, 1, name);
    pw::put_bytes(one, 2, chunk);
    pw::put_bytes(batch, 1, one);
  }
  return batch;
}

spark::connect::ExecutePlanRequest execute(const std::string& session, const std::string& user_id,
                                           const std::string& op_id, reattachable mode) {
  spark::connect::ExecutePlanRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  req.set_plan("plan bytes scg never parses");
  if (!op_id.empty()) req.set_operation_id(op_id);
  if (mode == reattachable::yes)
    req.add_request_options()->mutable_reattach_options()->set_reattachable(true);
  return req;
}

spark::connect::ReattachExecuteRequest reattach(const std::string& session, const std::string& user_id,
                                                const std::string& op_id, const std::string& last) {
  spark::connect::ReattachExecuteRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user(user_id);
  req.set_operation_id(op_id);
  if (!last.empty()) req.set_last_response_id(last);
  return req;
}


void skip_test(const std::string& reason) {
  const auto& config = *Catch::getCurrentContext().getConfig();
  const bool alone = Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config).size() == 1;
  if (!alone) {
    WARN("skipped: " << reason);
    return;
  }
  std::cout << "SKIPPED: " << reason << std::endl;
  std::cerr.flush();
  std::exit(skip_code);
}

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string sh_out(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

namespace {
std::string ip_path() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "ip";
}
}  // namespace

netns_claim::netns_claim(const std::vector<std::string>& prefixes, const std::vector<int>& second_octets) {
  lock_fd_ = ::open("/tmp/scg-netns.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0) return;
  // Names in use: namespaces ("NAME" or "NAME (id: N)") and the root namespace's links ("N: NAME@PEER: ...").
  std::vector<std::string> names;
  std::istringstream netns(sh_out("ip netns list"));
  for (std::string line; std::getline(netns, line);) names.push_back(line.substr(0, line.find(' ')));
  std::istringstream links(sh_out("ip -o link show"));
  for (std::string line; std::getline(links, line);) {
    const auto from = line.find(": ");
    if (from == std::string::npos) continue;
    names.push_back(line.substr(from + 2, line.find_first_of("@:", from + 2) - from - 2));
  }
  const auto taken = [&](const std::string& name) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.rfind(name, 0) == 0 &&
             (n.size() == name.size() || !std::isdigit(static_cast<unsigned char>(n[name.size()])));
    });
  };
  for (int k = 0; k < 100000 && id_.empty(); ++k) {
    const auto id = std::to_string((getpid() + k) % 100000);
    if (std::none_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return taken(p + id); })) id_ = id;
  }
  const auto addresses = sh_out("ip -o -4 addr show");
  for (int k = 0; k < 250 && octet_.empty(); ++k) {
    const auto octet = std::to_string((getpid() + k) % 250 + 1);
    if (std::none_of(second_octets.begin(), second_octets.end(), [&](int s) {
          return addresses.find(" 10." + std::to_string(s) + "." + octet + ".") != std::string::npos;
        }))
      octet_ = octet;
  }
  ok_ = !id_.empty() && !octet_.empty();
}

netns_claim::~netns_claim() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // and the lock with it
}

netns_link::netns_link() {
  netns_claim claim({"scgtest", "scgh", "scgn"}, {251});
  if (!claim.ok()) return;
  const auto& id = claim.id();
  ns_ = "scgtest" + id;
  host_if_ = "scgh" + id;
  ns_if_ = "scgn" + id;
  host_ip_ = "10.251." + claim.octet() + ".1";
  ns_ip_ = "10.251." + claim.octet() + ".2";
  // Made under the claim: the next test's claim sees these names and the host's address.
  ok_ = sh("ip netns add " + ns_) && sh("ip link add " + host_if_ + " type veth peer name " + ns_if_) &&
        sh("ip link set " + ns_if_ + " netns " + ns_) && sh("ip addr add " + host_ip_ + "/30 dev " + host_if_) &&
        sh("ip link set " + host_if_ + " up") && sh("ip -n " + ns_ + " addr add " + ns_ip_ + "/30 dev " + ns_if_) &&
        sh("ip -n " + ns_ + " link set " + ns_if_ + " up") && sh("ip -n " + ns_ + " link set lo up");
}

netns_link::~netns_link() {
  if (ns_.empty()) return;  // nothing was made
  sh("ip link del " + host_if_);
  sh("ip netns del " + ns_);
}

void netns_link::cut() { REQUIRE(sh("ip link set " + host_if_ + " down")); }
void netns_link::heal() { REQUIRE(sh("ip link set " + host_if_ + " up")); }
std::vector<std::string> netns_link::inside() const { return {ip_path(), "netns", "exec", ns_}; }

stream_result execute_plan(spark::connect::SparkConnectService::Stub& stub,
                           const spark::connect::ExecutePlanRequest& req,
                           const std::map<std::string, std::string>& md, grpc_compression_algorithm algo) {
  grpc::ClientContext ctx;
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  if (algo != GRPC_COMPRESS_NONE) ctx.set_compression_algorithm(algo);
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  stream_result out;
  auto reader = stub.ExecutePlan(&ctx, req);
  spark::connect::ExecutePlanResponse r;
  while (reader->Read(&r)) {
    ++out.responses;
    out.complete = r.has_result_complete();
  }
  out.status = reader->Finish();
  out.backend = header(ctx, "x-fake-backend");
  if (out.backend.empty()) out.backend = header(ctx, "x-fake-backend", true);
  return out;
}

}  // namespace scg::test
