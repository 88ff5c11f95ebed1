// The cluster under randomized faults: 3-5 replicas and 3 backends, a
// workload of many sessions doing every RPC through random replicas, and a
// nemesis that kills, freezes, partitions, restarts, adds and removes
// replicas and kills backends at seeded random times. The history of every
// call goes to tests/nemesis/checker, which fails the run on any violation
// of the cluster's invariants (docs/cluster.md, "Under faults"); the run
// fails too when it made fewer faults of a kind, or fewer calls answered
// OK, than a run of its length makes (did_its_work).
//
// Each replica lives in a network namespace of its own with two links into a
// hub namespace: one for clients and backends (never cut) and one for the
// cluster, whose hub end the nemesis moves between two bridges to partition.
// The test creates and removes every namespace and link, and cleans every
// process up by pid.
//
// Settings (environment): SCG_NEMESIS_SEED (1), SCG_NEMESIS_SECS (75),
// SCG_NEMESIS_REPLICAS (4, 3 to 5), SCG_NEMESIS_CLIENTS (6), SCG_NEMESIS_OUT
// (where the history of a failed run is kept: nemesis-SEED.jsonl, "."),
// SCG_NEMESIS_KEEP=1 (keep it after a passed run too), SCG_NEMESIS_REPLAY=FILE
// (only check a kept history), SCG_NEMESIS_FAULTS (the fault kinds to draw
// from, comma-separated: kill, freeze, partition, split, restart, join,
// leave, backend_kill; all by default; each round of draws begins with
// every kind once). scripts/nemesis.sh SEED SECS runs it.
#include <catch2/catch.hpp>

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tests/integration/harness.hpp"
#include "tests/nemesis/checker.hpp"

namespace sc = spark::connect;
namespace nm = scg::nemesis;
using namespace scg::test;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

/// The run's clock: ms since it started.
struct run_clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::int64_t now() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  }
};

/// The test's network: a hub namespace with a bridge for clients and
/// backends (`bs`, the root namespace joined to it), two for the cluster
/// (`bc0` the main side, `bc1` the cut-off one), and a namespace per replica
/// slot linked to `bs` and to one of the cluster bridges.
class topology {
 public:
  static constexpr int slots = 8;

  topology() {
    // Names and the third octet free on this host, held while the
    // namespaces and the root side's address are made (10.253.X lives only
    // in this topology's namespaces, and goes with its 10.252.X).
    netns_claim claim({"scgnh", "scgnr"}, {252, 253});
    if (!claim.ok()) return;
    octet_ = claim.octet();
    hub_ = "scgnh" + claim.id();
    root_if_ = "scgnr" + claim.id();
    ok_ = sh("ip netns add " + hub_) && sh("ip -n " + hub_ + " link set lo up");
    for (const char* br : {"bs", "bc0", "bc1"})
      ok_ = ok_ && sh("ip -n " + hub_ + " link add " + br + " type bridge") &&
            sh("ip -n " + hub_ + " link set " + br + " up");
    ok_ = ok_ && sh("ip link add " + root_if_ + " type veth peer name rt netns " + hub_) &&
          sh("ip addr add " + root_ip() + "/24 dev " + root_if_) && sh("ip link set " + root_if_ + " up") &&
          sh("ip -n " + hub_ + " link set rt master bs up");
    for (int s = 0; s < slots && ok_; ++s) {
      const auto ns = slot_ns(s), k = std::to_string(s);
      made_.push_back(ns);
      ok_ = sh("ip netns add " + ns) && sh("ip -n " + ns + " link set lo up") &&
            sh("ip -n " + hub_ + " link add hs" + k + " type veth peer name s netns " + ns) &&
            sh("ip -n " + hub_ + " link set hs" + k + " master bs up") &&
            sh("ip -n " + ns + " addr add " + service_ip(s) + "/24 dev s") && sh("ip -n " + ns + " link set s up") &&
            sh("ip -n " + hub_ + " link add hc" + k + " type veth peer name c netns " + ns) &&
            sh("ip -n " + hub_ + " link set hc" + k + " master bc0 up") &&
            sh("ip -n " + ns + " addr add " + cluster_ip(s) + "/24 dev c") && sh("ip -n " + ns + " link set c up");
    }
  }
  ~topology() {
    if (hub_.empty()) return;  // nothing was made
    sh("ip link del " + root_if_);
    for (const auto& ns : made_) sh("ip netns del " + ns);
    sh("ip netns del " + hub_);
  }
  topology(const topology&) = delete;
  topology& operator=(const topology&) = delete;

  bool ok() const { return ok_; }
  std::string root_ip() const { return "10.252." + octet_ + ".254"; }
  std::string service_ip(int s) const { return "10.252." + octet_ + "." + std::to_string(s + 1); }
  std::string cluster_ip(int s) const { return "10.253." + octet_ + "." + std::to_string(s + 1); }
  std::vector<std::string> inside(int s) const { return {"/usr/sbin/ip", "netns", "exec", slot_ns(s)}; }
  /// Puts slot `s`'s cluster link on the main side (0) or the cut-off one (1):
  /// packets between the sides vanish, nobody sees a reset.
  bool side(int s, int bridge) {
    return sh("ip -n " + hub_ + " link set hc" + std::to_string(s) + " master bc" + std::to_string(bridge));
  }

 private:
  std::string slot_ns(int s) const { return hub_ + "r" + std::to_string(s); }
  std::string hub_, root_if_, octet_;
  std::vector<std::string> made_;
  bool ok_ = false;
};

/// A backend on the root side, restarted on the same ports after a kill.
struct backend {
  std::string name;
  std::unique_ptr<process> proc;
  int grpc = 0, ui = 0;
};

/// A replica slot: the replica's name and process, while it has one.
struct replica {
  std::string name;
  int slot = 0;
  std::unique_ptr<process> proc;
  int grpc = 0, admin = 0, cluster = 0;
  bool alive = false;        ///< started and not killed or stopped
  bool in_rotation = false;  ///< clients send to it (a load balancer's view)
  bool frozen = false;
};

/// A replica as a client picks it.
struct target {
  std::string name, host;
  int port = 0;
};

constexpr auto call_deadline = std::chrono::seconds(5);
constexpr auto stream_deadline = std::chrono::seconds(8);
constexpr int max_sessions_per_client = 60;

/// A session named whole (its user and id), as the admin API's key= looks it up.
struct session_ref {
  std::string user, id;
};

struct run_state {
  topology& net;
  temp_dir& dir;
  run_clock clock;
  std::mutex mu;  // guards replicas, backends' ports, recent, next_name
  std::vector<replica> replicas;
  std::vector<backend> backends;
  std::vector<session_ref> recent;  ///< sessions with a recent answer, for the convergence probes
  int generation = 0;
  int next_name = 0;
  std::atomic<bool> stop{false};

  run_state(topology& n, temp_dir& d) : net(n), dir(d) {}

  std::vector<target> rotation() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<target> out;
    for (const auto& r : replicas)
      if (r.in_rotation) out.push_back({r.name, net.service_ip(r.slot), r.grpc});
    return out;
  }

  void note_recent(const std::string& user, const std::string& session) {
    std::lock_guard<std::mutex> lock(mu);
    recent.push_back({user, session});
    if (recent.size() > 12) recent.erase(recent.begin());
  }
};

// --- processes -------------------------------------------------------------------------

void start_backend(run_state& st, backend& b) {
  const auto ports = st.dir.file(b.name + ".ports");
  std::remove(ports.c_str());
  const auto host = st.net.root_ip();
  b.proc = std::make_unique<process>(
      std::vector<std::string>{bin("scg-fake-spark"), "--listen", host + ":" + std::to_string(b.grpc), "--ui-listen",
                               host + ":" + std::to_string(b.ui), "--name", b.name, "--port-file", ports,
                               "--responses", "4"},
      st.dir.file(b.name + ".log"));
  auto j = wait_for_json_file(ports, 10s);
  b.grpc = j.at("grpc").get<int>();
  b.ui = j.at("ui").get<int>();
}

/// Starts the replica of `r.slot`, seeded with the other live replicas; true once ready.
bool start_replica(run_state& st, replica& r) {
  std::string yaml;
  std::vector<std::string> seeds;
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    const auto sip = st.net.service_ip(r.slot);
    yaml = "bind_addr: \"" + sip + ":0\"\nadmin_addr: \"" + sip + ":0\"\nbackends:\n";
    for (const auto& b : st.backends)
      yaml += "  - { name: " + b.name + ", address: \"" + st.net.root_ip() + ":" + std::to_string(b.grpc) +
              "\", ui_url: \"http://" + st.net.root_ip() + ":" + std::to_string(b.ui) + "\" }\n";
    for (const auto& o : st.replicas)
      if (o.alive && o.name != r.name) seeds.push_back(st.net.cluster_ip(o.slot) + ":" + std::to_string(o.cluster));
    tag = r.name + "-" + std::to_string(st.generation++);
  }
  yaml += "logging: { level: info }\nshutdown: { deadline_secs: 2 }\n"
          "on_backend_lost: { after_secs: 600, action: rebind }\n"
          "cluster:\n  node_name: " + r.name + "\n  bind_addr: \"" + st.net.cluster_ip(r.slot) +
          ":0\"\n  sync_wait_secs: 2\n  seeds: [";
  for (std::size_t i = 0; i < seeds.size(); ++i) yaml += (i ? ", \"" : "\"") + seeds[i] + "\"";
  yaml += "]\n";
  auto g = start_gateway(st.dir, yaml, tag, st.net.inside(r.slot));
  const auto host = st.net.service_ip(r.slot);
  const bool ready = eventually([&] { return http_get_at(host, g.admin_port, "/readyz").first == 200; }, 15s);
  std::lock_guard<std::mutex> lock(st.mu);
  r.proc = std::make_unique<process>(std::move(g.proc));
  r.grpc = g.grpc_port;
  r.admin = g.admin_port;
  r.cluster = g.cluster_port;
  r.alive = true;
  r.frozen = false;
  return ready;
}

// --- the workload ------------------------------------------------------------------------

std::string md_value(const grpc::ClientContext& ctx, const std::string& key) {
  auto v = header(ctx, key);
  return v.empty() ? header(ctx, key, true) : v;
}

/// One client: its own sessions (user uN), its own random stream, its own history.
class client {
 public:
  client(run_state& st, int index, std::uint64_t seed)
      : st_(st), user_("u" + std::to_string(index)), rng_(seed), prefix_(user_ + "-" + std::to_string(seed % 100000)) {}

  void run(std::int64_t until_ms) {
    for (int i = 0; i < 1000000 && !st_.stop.load() && st_.clock.now() < until_ms; ++i) {
      const int dice = pick(100);
      if (sessions_.empty() || dice < 22) {
        new_session();
      } else if (dice < 45) {
        plain(any_session(), pick(2) == 0 ? "config" : "analyze");
      } else if (dice < 80) {
        operation(any_session());
      } else if (dice < 92) {
        clone(any_session());
      } else {
        release(any_session());
      }
    }
  }

  std::vector<nm::call> calls;
  std::set<std::string> used;  ///< every session id it sent (not the probes')

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::string any_session() { return sessions_[static_cast<std::size_t>(pick(static_cast<int>(sessions_.size())))]; }
  /// A new session or operation id: a UUID (as Spark requires) named by the
  /// client's prefix, `kind` and a counter, so a seed always draws the same ids.
  std::string fresh(const char* kind) { return uuid_of(prefix_ + "-" + kind + "-" + std::to_string(counter_++)); }

  std::optional<target> replica_other_than(const std::string& not_this = "") {
    auto r = st_.rotation();
    if (r.size() > 1 && !not_this.empty())
      r.erase(std::remove_if(r.begin(), r.end(), [&](const target& t) { return t.name == not_this; }), r.end());
    if (r.empty()) return std::nullopt;
    return r[static_cast<std::size_t>(pick(static_cast<int>(r.size())))];
  }

  std::unique_ptr<sc::SparkConnectService::Stub> stub(const target& t) {
    const auto addr = t.host + ":" + std::to_string(t.port);
    auto& ch = channels_[addr];
    if (!ch) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // Back within 100-500 ms of a replica's restart, but each connection
      // attempt may take up to 2 s (gRPC's minimum connect time-out is the
      // minimum backoff; clients' default is 20 s): at 100 ms, a replica
      // whose machine was saturated by a peer's full sync failed calls with
      // "timed out before receiving SETTINGS frame", a client's limit, not
      // the replica's.
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
      ch = grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
    }
    return sc::SparkConnectService::NewStub(ch);
  }

  nm::call begin(const target& t, const char* rpc, const std::string& session) {
    nm::call c;
    c.start_ms = st_.clock.now();
    c.replica = t.name;
    c.rpc = rpc;
    c.session = session;
    return c;
  }
  void end(nm::call& c, const grpc::ClientContext& ctx, const grpc::Status& s) {
    c.end_ms = st_.clock.now();
    c.code = s.error_code();
    c.message = s.error_message();
    c.backend = md_value(ctx, "x-fake-backend");
    if (c.code == 0 && !c.by_op) st_.note_recent(user_, c.session);
    calls.push_back(c);
  }
  static void deadline(grpc::ClientContext& ctx, std::chrono::seconds d) {
    ctx.set_deadline(std::chrono::system_clock::now() + d);
  }

  /// A config or analyze call of `session` through `t`.
  void unary(const target& t, const std::string& session, const std::string& rpc) {
    auto s = stub(t);
    grpc::ClientContext ctx;
    deadline(ctx, call_deadline);
    auto c = begin(t, rpc.c_str(), session);
    grpc::Status status;
    if (rpc == "config") {
      sc::ConfigRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user(user_);
      sc::ConfigResponse resp;
      status = s->Config(&ctx, req, &resp);
    } else {
      sc::AnalyzePlanRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user(user_);
      sc::AnalyzePlanResponse resp;
      status = s->AnalyzePlan(&ctx, req, &resp);
    }
    used.insert(session);
    end(c, ctx, status);
  }

  void plain(const std::string& session, const char* rpc) {
    if (auto t = replica_other_than()) unary(*t, session, rpc);
  }

  /// A brand-new session; one in four starts at two replicas at once. The
  /// client keeps it once a first call has been answered OK: a session no
  /// call created does not exist on any backend (as in Spark, a clone of it
  /// is SESSION_NOT_FOUND).
  void new_session() {
    if (static_cast<int>(sessions_.size()) >= max_sessions_per_client) return release(any_session());
    const auto id = fresh("s");
    auto a = replica_other_than();
    if (!a) return;
    if (pick(4) == 0) {
      auto b = replica_other_than(a->name);
      if (b && b->name != a->name) {
        // Two first calls at once: their records are written after both end.
        client twin(st_, 0, rng_());
        twin.user_ = user_;
        std::thread other([&] { twin.unary(*b, id, "config"); });
        unary(*a, id, "config");
        other.join();
        const bool created = calls.back().code == 0 || twin.calls.back().code == 0;
        calls.insert(calls.end(), twin.calls.begin(), twin.calls.end());
        if (created) sessions_.push_back(id);
        return;
      }
    }
    unary(*a, id, "config");
    if (calls.back().code == 0) sessions_.push_back(id);
  }

  struct stream_out {
    std::string op, last;
    bool complete = false;
  };

  /// Reads an ExecutePlan or ReattachExecute stream to its end.
  template <class Reader>
  static stream_out drain(Reader& reader) {
    stream_out out;
    sc::ExecutePlanResponse resp;
    for (int i = 0; i < 10000 && reader->Read(&resp); ++i) {
      if (out.op.empty()) out.op = resp.operation_id();
      if (!resp.response_id().empty()) out.last = resp.response_id();
      if (resp.has_result_complete()) out.complete = true;
    }
    return out;
  }

  /// ExecutePlan cut after two responses, a reattach under a new session id
  /// at once through another replica (answered SESSION_NOT_FOUND by the
  /// operation's backend), the reattach that finishes it through a third,
  /// and its release through a fourth.
  void operation(const std::string& session) {
    auto a = replica_other_than();
    if (!a) return;
    const bool chosen = pick(2) == 0;
    std::string op = chosen ? fresh("op") : std::string();
    stream_out first;
    bool reached = false;  // a backend answered: the operation exists (or existed)
    {
      auto s = stub(*a);
      grpc::ClientContext ctx;
      deadline(ctx, stream_deadline);
      ctx.AddMetadata("x-fake-stream-max-responses", "2");
      auto c = begin(*a, "execute", session);
      auto reader = s->ExecutePlan(&ctx, execute(session, user_, op));
      first = drain(reader);
      auto status = reader->Finish();
      if (op.empty()) op = first.op;
      c.op = op;
      used.insert(session);
      end(c, ctx, status);
      reached = !calls.back().backend.empty();
    }
    if (op.empty() || !reached) return;  // no backend started it
    if (auto b = replica_other_than(a->name)) reattach_call(*b, fresh("probe"), op, "", true);
    if (auto c = replica_other_than(a->name)) reattach_call(*c, session, op, first.last, false);
    if (auto d = replica_other_than()) {
      auto s = stub(*d);
      grpc::ClientContext ctx;
      deadline(ctx, call_deadline);
      auto c = begin(*d, "release_execute", session);
      c.op = op;
      c.by_op = true;
      sc::ReleaseExecuteRequest req;
      req.set_session_id(session);
      *req.mutable_user_context() = user(user_);
      req.set_operation_id(op);
      req.mutable_release_all();
      sc::ReleaseExecuteResponse resp;
      auto status = s->ReleaseExecute(&ctx, req, &resp);
      end(c, ctx, status);
    }
  }

  void reattach_call(const target& t, const std::string& session, const std::string& op, const std::string& last,
                     bool probe) {
    auto s = stub(t);
    grpc::ClientContext ctx;
    deadline(ctx, stream_deadline);
    auto c = begin(t, "reattach", session);
    c.op = op;
    c.by_op = true;
    c.probe = probe;
    auto reader = s->ReattachExecute(&ctx, reattach(session, user_, op, last));
    drain(reader);
    end(c, ctx, reader->Finish());
  }

  void clone(const std::string& session) {
    auto t = replica_other_than();
    if (!t || static_cast<int>(sessions_.size()) >= max_sessions_per_client) return;
    const auto id = fresh("c");
    auto s = stub(*t);
    grpc::ClientContext ctx;
    deadline(ctx, call_deadline);
    auto c = begin(*t, "clone", session);
    c.new_session = id;
    sc::CloneSessionRequest req;
    req.set_session_id(session);
    *req.mutable_user_context() = user(user_);
    req.set_new_session_id(id);
    sc::CloneSessionResponse resp;
    auto status = s->CloneSession(&ctx, req, &resp);
    end(c, ctx, status);
    if (!status.ok()) return;
    sessions_.push_back(id);
    used.insert(id);
    if (auto o = replica_other_than(t->name)) unary(*o, id, "config");  // at once, elsewhere
  }

  void release(const std::string& session) {
    auto t = replica_other_than();
    if (!t) return;
    auto s = stub(*t);
    grpc::ClientContext ctx;
    deadline(ctx, call_deadline);
    auto c = begin(*t, "release_session", session);
    sc::ReleaseSessionRequest req;
    req.set_session_id(session);
    *req.mutable_user_context() = user(user_);
    sc::ReleaseSessionResponse resp;
    auto status = s->ReleaseSession(&ctx, req, &resp);
    end(c, ctx, status);
    if (status.ok()) sessions_.erase(std::find(sessions_.begin(), sessions_.end(), session));
  }

  run_state& st_;
  std::string user_;
  std::mt19937_64 rng_;
  std::string prefix_;
  std::uint64_t counter_ = 0;
  std::vector<std::string> sessions_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

// --- what the replicas' tables say ---------------------------------------------------------

/// Session id -> backend in one replica's table (all pages); nullopt when it did not answer.
std::optional<std::map<std::string, std::string>> table_of(const std::string& host, int admin) {
  std::map<std::string, std::string> out;
  std::string after;
  for (int page = 0; page < 100; ++page) {
    auto [code, body] = http_get_at(host, admin, "/api/v1/sessions?limit=1000" + (after.empty() ? "" : "&after=" + after));
    if (code != 200) return std::nullopt;
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    for (const auto& s : j["sessions"]) out[s["session_id"].get<std::string>()] = s["backend"].get<std::string>();
    if (!j.contains("next") || j["next"].is_null()) return out;
    after = j["next"].get<std::string>();  // hex: nothing to escape
  }
  return out;
}

/// The backends of `sessions` in a replica's table ("" when absent), read in
/// one request; nullopt when it did not answer. Each is named whole (tenant,
/// user, id), so the replica looks them up rather than scanning its table:
/// the poll's pace does not follow the table's size.
std::optional<std::vector<std::string>> backends_in(httplib::Client& c, const std::vector<session_ref>& sessions) {
  std::string path = "/api/v1/sessions?limit=1000";
  for (const auto& s : sessions) path += "&key=default/" + s.user + "/" + s.id;  // [a-z0-9-]
  auto r = c.Get(path.c_str());
  if (!r || r->status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  std::map<std::string, std::string> found;
  for (const auto& row : j["sessions"]) found[row["session_id"].get<std::string>()] = row["backend"].get<std::string>();
  std::vector<std::string> out;
  for (const auto& s : sessions) out.push_back(found.count(s.id) ? found[s.id] : std::string());
  return out;
}

/// Ms from `heal_ms` until every live replica names the same backend for
/// each of the recently used sessions; -1 after 10 s. Each round asks every
/// replica at once (a thread each, one request for all the sessions), so a
/// round lasts as long as the slowest replica's answer, and the replicas'
/// answers are about one moment's; each session counts from the answer that
/// completed its agreement, not from the round's end.
std::int64_t convergence(run_state& st, std::int64_t heal_ms) {
  std::vector<session_ref> probes;
  std::vector<std::pair<std::string, int>> admins;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    probes = st.recent;
    for (const auto& r : st.replicas)
      if (r.alive && !r.frozen) admins.emplace_back(st.net.service_ip(r.slot), r.admin);
  }
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (const auto& [host, port] : admins) {
    clients.push_back(std::make_unique<httplib::Client>(host, port));
    clients.back()->set_connection_timeout(1);
    clients.back()->set_read_timeout(2);
    clients.back()->set_keep_alive(true);
  }
  std::string last;  // the last disagreement seen, printed when agreement is slow
  // since[i]: when probes[i] last started to agree (the latest answer of the
  // round that first agreed since its last disagreement); -1 while it does not.
  std::vector<std::int64_t> since(probes.size(), -1);
  int round = 0;
  for (; round < 1000 && st.clock.now() < heal_ms + 10000; ++round) {
    // seen[k][i]: replica k's backend for probes[i] (nullopt: no answer), at[k][i] when it came.
    std::vector<std::vector<std::optional<std::string>>> seen(clients.size());
    std::vector<std::vector<std::int64_t>> at(clients.size());
    std::vector<std::thread> askers;
    for (std::size_t k = 0; k < clients.size(); ++k)
      askers.emplace_back([&, k] {
        const auto answer = backends_in(*clients[k], probes);
        const auto now = st.clock.now();
        for (std::size_t i = 0; i < probes.size(); ++i) {
          seen[k].push_back(answer ? std::optional<std::string>((*answer)[i]) : std::nullopt);
          at[k].push_back(now);
        }
      });
    for (auto& t : askers) t.join();
    bool agree = true;
    for (std::size_t i = 0; i < probes.size(); ++i) {
      bool same = true;
      std::int64_t latest = 0;
      for (std::size_t k = 0; k < clients.size() && same; ++k) {
        const auto& b = seen[k][i];
        const auto& first = seen[0][i];
        latest = std::max(latest, at[k][i]);
        if (b && first && *b == *first) continue;
        same = false;
        auto said = [](const std::optional<std::string>& x) { return x ? "'" + *x + "'" : std::string("no answer"); };
        last = "session=" + probes[i].id + " replica=" + admins[k].first + " saw=" + said(b) +
               " first=" + said(first) + " at_ms=" + std::to_string(at[k][i] - heal_ms);
      }
      if (!same) since[i] = -1;
      else if (since[i] < 0) since[i] = latest;
      agree = agree && same;
    }
    if (agree) {
      // Each session agreed from its own `since` on: the last of them is when all did.
      const auto after = (probes.empty() ? st.clock.now() : *std::max_element(since.begin(), since.end())) - heal_ms;
      if (after > 1000)
        std::cout << "slow_convergence heal_ms=" << heal_ms << " after_ms=" << after << " rounds=" << round
                  << " last: " << last << std::endl;
      return after;
    }
    std::this_thread::sleep_for(20ms);  // the poll interval
  }
  std::cout << "no_convergence heal_ms=" << heal_ms << " rounds=" << round << " last: " << last << std::endl;
  return -1;
}

// --- the nemesis ----------------------------------------------------------------------------

class nemesis {
 public:
  /// `kinds`: the fault kinds to draw from (fault_kinds' names); empty: all.
  nemesis(run_state& st, std::uint64_t seed, const std::set<std::string>& kinds) : st_(st), rng_(seed) {
    for (const auto& k : fault_kinds)
      if (kinds.empty() || kinds.count(k.name)) chosen_.push_back(&k);
  }
  std::vector<nm::fault> faults;
  std::vector<nm::convergence> heals;
  std::vector<std::string> problems;  ///< the nemesis's own failures (a replica that would not start)

  void run(std::int64_t until_ms) {
    for (int i = 0; i < 10000 && st_.clock.now() < until_ms; ++i) {
      sleep_ms(uniform(2500, 5000));  // time between faults, with the cluster whole
      if (st_.clock.now() >= until_ms) break;
      if (next_ == round_.size()) new_round();
      (this->*round_[next_++])();
    }
  }

  /// A fault kind: its name (SCG_NEMESIS_FAULTS), how many of the 14 draws
  /// of a round with every kind it has, and what it does.
  struct fault_kind {
    const char* name;
    int weight;
    void (nemesis::*act)();
  };
  static const std::array<fault_kind, 8> fault_kinds;

  /// The kind a fault counts as for the minimums: join and leave together,
  /// since each becomes the other at the bounds of 3 and 5 replicas.
  static std::string counted_as(const std::string& kind) {
    return kind == "join" || kind == "leave" ? "join+leave" : kind;
  }

  /// The fewest faults of each kind (counted_as) a run of `secs` drawing
  /// from `kinds` (empty: all) makes: a fault at least every
  /// `max_fault_cycle_ms` (a run of every kind makes one every 6.2 to 7.5 s:
  /// 12 in 75 s, 240 to 280 in 1800 s), and each round of draws begins with
  /// every kind once.
  static std::map<std::string, std::size_t> minimums(const std::set<std::string>& kinds, std::int64_t secs) {
    std::vector<const fault_kind*> chosen;
    std::size_t round = 0;
    for (const auto& k : fault_kinds)
      if (kinds.empty() || kinds.count(k.name)) {
        chosen.push_back(&k);
        round += static_cast<std::size_t>(k.weight);
      }
    const auto faults = static_cast<std::size_t>(secs * 1000 / max_fault_cycle_ms);
    const std::size_t full = faults / round, rest = faults % round;
    std::map<std::string, std::size_t> out;
    for (const auto* k : chosen)
      out[counted_as(k->name)] += full * static_cast<std::size_t>(k->weight) + (rest >= chosen.size() ? 1 : 0);
    return out;
  }
  static constexpr std::int64_t max_fault_cycle_ms = 9000;

 private:
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  static void sleep_ms(std::int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

  /// The next round of draws: every chosen kind once, in a seeded order (so
  /// a short run meets each of them), then the further draws of the kinds
  /// weighing more than one, shuffled.
  void new_round() {
    std::vector<void (nemesis::*)()> once, more;
    for (const auto* k : chosen_) {
      once.push_back(k->act);
      more.insert(more.end(), static_cast<std::size_t>(k->weight - 1), k->act);
    }
    std::shuffle(once.begin(), once.end(), rng_);
    std::shuffle(more.begin(), more.end(), rng_);
    round_ = std::move(once);
    round_.insert(round_.end(), more.begin(), more.end());
    next_ = 0;
  }

  std::vector<std::size_t> live() {
    std::lock_guard<std::mutex> lock(st_.mu);
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < st_.replicas.size(); ++i)
      if (st_.replicas[i].alive) out.push_back(i);
    return out;
  }
  std::size_t any_live() {
    auto l = live();
    return l[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(l.size()) - 1))];
  }
  void set_rotation(std::size_t i, bool on) {
    std::lock_guard<std::mutex> lock(st_.mu);
    st_.replicas[i].in_rotation = on;
  }
  void bring_up(std::size_t i) {
    if (!start_replica(st_, st_.replicas[i])) problems.push_back(st_.replicas[i].name + " was not ready within 15 s");
    set_rotation(i, true);
  }

  void kill() {
    auto i = any_live();
    auto& r = st_.replicas[i];
    const auto t0 = st_.clock.now();
    r.proc->signal(SIGKILL);
    r.proc->wait(5s);
    { std::lock_guard<std::mutex> lock(st_.mu); r.alive = false; }
    sleep_ms(uniform(1000, 3000));  // clients still send to it
    set_rotation(i, false);         // its restart is not ready yet
    bring_up(i);
    faults.push_back({"kill", t0, st_.clock.now(), {r.name}});
  }

  void freeze() {
    auto i = any_live();
    auto& r = st_.replicas[i];
    const auto t0 = st_.clock.now();
    { std::lock_guard<std::mutex> lock(st_.mu); r.frozen = true; }
    r.proc->signal(SIGSTOP);
    sleep_ms(uniform(1000, 3000));
    r.proc->signal(SIGCONT);
    { std::lock_guard<std::mutex> lock(st_.mu); r.frozen = false; }
    faults.push_back({"freeze", t0, st_.clock.now(), {r.name}});
  }

  void cut_one() { partition(false); }
  void split() { partition(true); }

  /// One replica (`split` false) or a minority cut off from the rest.
  void partition(bool split) {
    auto l = live();
    std::shuffle(l.begin(), l.end(), rng_);
    const std::size_t cut = split ? std::max<std::size_t>(1, (l.size() - 1) / 2) : 1;
    std::vector<std::string> names;
    const auto t0 = st_.clock.now();
    for (std::size_t k = 0; k < cut; ++k) {
      const auto& r = st_.replicas[l[k]];
      if (!st_.net.side(r.slot, 1)) problems.push_back("could not cut " + r.name + " off");
      names.push_back(r.name);
    }
    sleep_ms(uniform(2000, 4000));
    for (std::size_t k = 0; k < cut; ++k)
      if (!st_.net.side(st_.replicas[l[k]].slot, 0)) problems.push_back("could not heal " + st_.replicas[l[k]].name);
    const auto healed = st_.clock.now();
    faults.push_back({split ? "split" : "partition", t0, healed, names});
    heals.push_back({healed, convergence(st_, healed)});
  }

  /// SIGTERM (a drain), out of rotation half a second later, started again.
  void restart() {
    auto i = any_live();
    auto& r = st_.replicas[i];
    const auto t0 = st_.clock.now();
    r.proc->signal(SIGTERM);
    sleep_ms(500);
    set_rotation(i, false);
    if (!r.proc->wait(10s)) problems.push_back(r.name + " did not exit within 10 s of SIGTERM");
    { std::lock_guard<std::mutex> lock(st_.mu); r.alive = false; }
    bring_up(i);
    faults.push_back({"restart", t0, st_.clock.now(), {r.name}});
  }

  /// A new member with a new name, on a free slot (at most 5 replicas).
  void join() {
    if (live().size() >= 5) return leave();
    std::size_t i = 0;
    {
      std::lock_guard<std::mutex> lock(st_.mu);
      std::set<int> taken;
      for (const auto& r : st_.replicas)
        if (r.alive || r.proc) taken.insert(r.slot);
      int slot = 0;
      while (taken.count(slot)) ++slot;
      if (slot >= topology::slots) return;
      st_.replicas.push_back({});
      i = st_.replicas.size() - 1;
      st_.replicas[i].name = "scg-" + std::to_string(st_.next_name++);
      st_.replicas[i].slot = slot;
    }
    const auto t0 = st_.clock.now();
    bring_up(i);
    faults.push_back({"join", t0, st_.clock.now(), {st_.replicas[i].name}});
  }

  /// A member leaves for good (SIGTERM), out of rotation first (at least 3 stay).
  void leave() {
    if (live().size() <= 3) return join();
    auto i = any_live();
    auto& r = st_.replicas[i];
    const auto t0 = st_.clock.now();
    set_rotation(i, false);
    r.proc->signal(SIGTERM);
    if (!r.proc->wait(10s)) problems.push_back(r.name + " did not exit within 10 s of SIGTERM");
    {
      std::lock_guard<std::mutex> lock(st_.mu);
      r.alive = false;
      r.proc.reset();
    }
    faults.push_back({"leave", t0, st_.clock.now(), {r.name}});
  }

  void backend_kill() {
    auto& b = st_.backends[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(st_.backends.size()) - 1))];
    const auto t0 = st_.clock.now();
    b.proc->signal(SIGKILL);
    b.proc->wait(5s);
    sleep_ms(uniform(1000, 3000));
    start_backend(st_, b);
    faults.push_back({"backend_kill", t0, st_.clock.now(), {b.name}});
  }

  run_state& st_;
  std::mt19937_64 rng_;
  std::vector<const fault_kind*> chosen_;   ///< the kinds it draws from
  std::vector<void (nemesis::*)()> round_;  ///< the draws of the current round (new_round)
  std::size_t next_ = 0;                    ///< the next of them
};

const std::array<nemesis::fault_kind, 8> nemesis::fault_kinds{{{"kill", 2, &nemesis::kill},
                                                               {"freeze", 2, &nemesis::freeze},
                                                               {"partition", 2, &nemesis::cut_one},
                                                               {"split", 2, &nemesis::split},
                                                               {"restart", 1, &nemesis::restart},
                                                               {"join", 1, &nemesis::join},
                                                               {"leave", 1, &nemesis::leave},
                                                               {"backend_kill", 3, &nemesis::backend_kill}}};

/// Prints the checker's report and the files of the run; the report.
nm::report judge(const nm::history& h, const std::string& file) {
  auto r = nm::check(h);
  std::cout << "nemesis seed=" << h.seed << " secs=" << h.secs << "\n";
  nm::print_report(r, std::cout);
  std::cout << "history=" << file << std::endl;
  return r;
}

/// The fewest calls answered OK per client and second of a run: seed 17's
/// 75 s with 6 clients on the otherwise idle 2-core machine made 155 to 195
/// (70,138 to 87,532 in four runs); a compiler beside it has cut a run's
/// calls to a third.
constexpr std::int64_t min_ok_calls_per_client_sec = 25;

/// Whether the run did what it is for, which no count of violations shows (a
/// nemesis or a workload that silently stopped passes the checker): as many
/// faults of each kind as a run this long makes, and calls answered OK.
bool did_its_work(const nm::history& h, const nm::report& r, const std::set<std::string>& kinds, int clients) {
  std::map<std::string, std::size_t> made;
  for (const auto& f : h.faults) ++made[nemesis::counted_as(f.kind)];
  bool enough = true;
  for (const auto& [kind, least] : nemesis::minimums(kinds, h.secs)) {
    std::cout << "faults{" << kind << "}=" << made[kind] << " (at least " << least << ")\n";
    INFO("faults of kind " << kind << ": " << made[kind] << ", at least " << least);
    CHECK(made[kind] >= least);
    enough = enough && made[kind] >= least;
  }
  const auto least_ok = static_cast<std::size_t>(h.secs * clients * min_ok_calls_per_client_sec);
  std::cout << "ok_calls=" << r.ok_calls << " (at least " << least_ok << ")" << std::endl;
  INFO("calls answered OK: " << r.ok_calls << ", at least " << least_ok);
  CHECK(r.ok_calls >= least_ok);
  return enough && r.ok_calls >= least_ok;
}

}  // namespace

TEST_CASE("the cluster keeps its invariants under randomized faults", "[.][nemesis][integration][cluster]") {
  if (const auto replay = env_or("SCG_NEMESIS_REPLAY", ""); !replay.empty()) {
    std::ifstream in(replay);
    REQUIRE(in);
    nm::history h;
    std::string error;
    INFO(error);
    REQUIRE(nm::read_history(in, h, &error));
    CHECK(judge(h, replay).violations() == 0);
    return;
  }
  if (geteuid() != 0) return skip_test("network namespaces need root");
  const auto seed = std::stoull(env_or("SCG_NEMESIS_SEED", "1"));
  const auto secs = std::stoll(env_or("SCG_NEMESIS_SECS", "75"));
  const int n_replicas = std::clamp(std::stoi(env_or("SCG_NEMESIS_REPLICAS", "4")), 3, 5);
  const int n_clients = std::clamp(std::stoi(env_or("SCG_NEMESIS_CLIENTS", "6")), 1, 32);
  std::set<std::string> kinds;
  for (std::string rest = env_or("SCG_NEMESIS_FAULTS", ""), k; !rest.empty();) {
    const auto comma = rest.find(',');
    k = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const bool known = std::any_of(nemesis::fault_kinds.begin(), nemesis::fault_kinds.end(),
                                   [&](const auto& f) { return k == f.name; });
    INFO("SCG_NEMESIS_FAULTS names an unknown fault kind: '" << k << "'");
    REQUIRE(known);
    kinds.insert(k);
  }
  auto net = std::make_unique<topology>();
  if (!net->ok()) {
    net.reset();  // its namespaces and links go before the exit
    return skip_test("could not create the network namespaces and bridges here");
  }
  bool passed = false;
  {
    temp_dir dir;
    run_state st(*net, dir);
    for (const char* name : {"fake-a", "fake-b", "fake-c"}) {
      st.backends.push_back({name, nullptr, 0, 0});
      start_backend(st, st.backends.back());
    }
    for (int i = 0; i < n_replicas; ++i) {
      st.replicas.push_back({});
      st.replicas.back().name = "scg-" + std::to_string(st.next_name++);
      st.replicas.back().slot = i;
    }
    st.replicas.reserve(topology::slots * 4);  // join() adds: references stay valid
    for (auto& r : st.replicas) {
      REQUIRE(start_replica(st, r));
      r.in_rotation = true;
    }

    const auto until = st.clock.now() + secs * 1000;
    std::vector<std::unique_ptr<client>> clients;
    for (int i = 0; i < n_clients; ++i) clients.push_back(std::make_unique<client>(st, i, seed * 1000 + i));
    std::vector<std::thread> threads;
    for (auto& c : clients) threads.emplace_back([&, c = c.get()] { c->run(until); });
    nemesis nem(st, seed, kinds);
    nem.run(until);
    st.stop = true;
    for (auto& t : threads) t.join();

    // Every replica slot that the run left stopped stays so; the others must
    // agree on every session once deltas have landed.
    std::this_thread::sleep_for(2s);
    nm::history h;
    h.seed = seed;
    h.secs = secs;
    h.faults = nem.faults;
    h.heals = nem.heals;
    std::set<std::string> used;
    for (auto& c : clients) {
      h.calls.insert(h.calls.end(), c->calls.begin(), c->calls.end());
      used.insert(c->used.begin(), c->used.end());
    }
    for (const auto& r : st.replicas) {
      if (!r.alive) continue;
      auto table = table_of(net->service_ip(r.slot), r.admin);
      if (!table) {
        nem.problems.push_back(r.name + " did not list its sessions at the end");
        continue;
      }
      for (const auto& s : used) {
        auto it = table->find(s);
        h.finals.push_back({s, r.name, it == table->end() ? std::string() : it->second});
      }
    }
    const auto out = env_or("SCG_NEMESIS_OUT", ".") + "/nemesis-" + std::to_string(seed) + ".jsonl";
    {
      std::ofstream file(out);
      nm::write_history(h, file);
    }
    const auto report = judge(h, out);
    passed = report.violations() == 0;
    passed = did_its_work(h, report, kinds, n_clients) && passed;
    for (const auto& p : nem.problems) std::cout << "nemesis_problem: " << p << "\n";
    passed = passed && nem.problems.empty();
    std::cout << "logs=" << dir.path() << (passed ? " (removed)" : " (kept)") << std::endl;
    if (!passed) setenv("SCG_TEST_KEEP", "1", 1);  // the replicas' logs, for the replay
    if (passed && env_or("SCG_NEMESIS_KEEP", "") != "1") std::remove(out.c_str());
    for (auto& r : st.replicas) r.proc.reset();
    for (auto& b : st.backends) b.proc.reset();
  }
  CHECK(passed);
}
