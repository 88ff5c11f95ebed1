// The nemesis checker (tests/nemesis/checker.hpp): the history's records and
// the rules that tell a violation from what a fault allows.
#include "tests/nemesis/checker.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <ostream>
#include <set>

namespace scg::nemesis {

namespace {

using json = nlohmann::json;

constexpr int code_cancelled = 1, code_deadline = 4, code_internal = 13, code_unavailable = 14;
/// In the message of scg's operation_unsettled refusal (actors/router_actor.cpp, nobody_knows).
constexpr const char* unsettled_text = "is not known to any replica heard from";
/// Violations printed (SCG_NEMESIS_EXAMPLES=N prints N, e.g. all of a replayed history's).
std::size_t max_examples() {
  const char* n = std::getenv("SCG_NEMESIS_EXAMPLES");
  return n && *n ? std::strtoul(n, nullptr, 10) : 20;
}

bool is_membership(const std::string& kind) {
  return kind == "kill" || kind == "freeze" || kind == "restart" || kind == "partition" || kind == "split" ||
         kind == "join" || kind == "leave";
}
/// A fault that takes its replica out of service (calls to it may fail).
bool stops_replica(const std::string& kind) {
  return kind == "kill" || kind == "freeze" || kind == "restart" || kind == "leave";
}
bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }
bool overlaps(std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1) { return a0 <= b1 && b0 <= a1; }

/// The error class in a Spark-style message, "[CLASS] text"; empty if none.
std::string error_class(const std::string& message) {
  auto open = message.find('[');
  auto close = message.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return {};
  return message.substr(open + 1, close - open - 1);
}

/// A session or operation handle the backend forgot: only a backend restart explains it.
bool forgotten_handle(const std::string& cls) {
  return cls.rfind("INVALID_HANDLE.", 0) == 0 || cls.rfind("INVALID_CURSOR.", 0) == 0;
}

struct checker {
  const history& h;
  const windows& w;
  report r;
  std::set<std::string> changed;  ///< sessions counted in check_sessions (allowed or not)
  std::set<std::string> tolerated_sessions;  ///< of those, the ones allowed (bound while replicas disagreed)

  void example(const std::string& text) {
    if (r.examples.size() < max_examples()) r.examples.push_back(text);
  }

  /// Replicas may disagree about membership at `t` (a fault around it).
  bool disturbed(std::int64_t t) const {
    for (const auto& f : h.faults)
      if (is_membership(f.kind) && t >= f.start_ms - w.before_ms && t <= f.end_ms + w.settle_ms) return true;
    return false;
  }

  /// Replica `a` could not have heard from `b` of a write `b` made in
  /// [t0, t1] by `until`: `b` died or was stopped before the write's delta
  /// went out, or the two were not linked from before the delta went out
  /// until `until`: a partition between them, or one of them frozen,
  /// restarted or just joined (its links are down until it has reconnected,
  /// as in a partition), not yet healed and settled.
  /// Returns why ("died", or the fault's kind), empty when `a` could have heard.
  std::string cut_off(const std::string& a, const std::string& b, std::int64_t t0, std::int64_t t1,
                      std::int64_t until) const {
    for (const auto& f : h.faults) {
      if (f.start_ms > t1 + w.before_ms) continue;  // the write had replicated
      const bool hit_a = has(f.targets, a), hit_b = has(f.targets, b);
      const bool dies = f.kind == "kill" || f.kind == "restart" || f.kind == "leave";
      if (dies && hit_b && f.start_ms >= t0 - w.before_ms) return "died";  // its delta died with it
      if (until > f.end_ms + w.settle_ms || f.end_ms + w.settle_ms < t0) continue;  // healed and settled
      if ((f.kind == "partition" || f.kind == "split") && hit_a != hit_b) return f.kind;
      if ((stops_replica(f.kind) || f.kind == "join") && (hit_a || hit_b)) return f.kind;
    }
    return {};
  }

  /// A release_session of `c`'s session started before `c` did.
  static bool release_tried(const call& c, const std::map<std::string, std::vector<const call*>>& sessions) {
    auto it = sessions.find(c.session);
    if (it == sessions.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(),
                       [&](const call* o) { return o->rpc == "release_session" && o->start_ms < c.start_ms; });
  }

  /// Backend `name` was killed between t0 and t1 (its state is gone).
  bool backend_restarted(const std::string& name, std::int64_t t0, std::int64_t t1) const {
    for (const auto& f : h.faults)
      if (f.kind == "backend_kill" && has(f.targets, name) && f.start_ms >= t0 && f.start_ms <= t1) return true;
    return false;
  }

  /// scg's operation_unsettled refusal (UNAVAILABLE: an operation id no
  /// replica answered for, under an unknown session, while the cluster
  /// settles) near the run's start or a fault that changed the membership.
  bool unsettled_explains(const call& c) const {
    if (c.code != code_unavailable || c.message.find(unsettled_text) == std::string::npos) return false;
    if (c.start_ms <= w.unsettled_ms) return true;
    for (const auto& f : h.faults)
      if (f.kind != "backend_kill" && overlaps(c.start_ms, c.end_ms, f.start_ms - w.before_ms, f.end_ms + w.unsettled_ms))
        return true;
    return false;
  }

  /// A failure explained by a fault on the call's replica or its backend.
  bool fault_explains(const call& c) const {
    const bool transport = c.code == code_unavailable || c.code == code_deadline || c.code == code_cancelled;
    if (!transport) return false;
    for (const auto& f : h.faults) {
      if (!overlaps(c.start_ms, c.end_ms, f.start_ms, f.end_ms + w.settle_ms)) continue;
      if (stops_replica(f.kind) && has(f.targets, c.replica)) return true;
      if (f.kind == "backend_kill")
        for (const auto& b : f.targets)
          if (c.backend == b || (c.backend.empty() && c.message.find(b) != std::string::npos)) return true;
    }
    return false;
  }

  void run() {
    r.calls = h.calls.size();
    r.faults = h.faults.size();
    // Sessions: every call that carries its session (not those routed by
    // operation, whose session ids are new), and a clone's new session from
    // the clone call on (it is bound to the backend that cloned it).
    std::map<std::string, std::vector<const call*>> sessions;
    std::map<std::string, std::vector<const call*>> ops;
    std::set<std::string> released;
    for (const auto& c : h.calls) {
      if (c.code == 0) ++r.ok_calls;
      if (!c.by_op && !c.session.empty()) sessions[c.session].push_back(&c);
      if (c.probe && c.code == code_internal && !c.backend.empty()) ++r.ok_calls;
      if (c.rpc == "clone" && c.code == 0 && !c.new_session.empty()) sessions[c.new_session].push_back(&c);
      if (!c.op.empty()) ops[c.op].push_back(&c);
      if (c.rpc == "release_session" && c.code == 0) released.insert(c.session);
    }
    r.sessions = sessions.size();
    r.operations = ops.size();
    std::set<std::string> tolerated_ops;
    check_sessions(sessions);
    check_ops(ops, tolerated_ops);
    check_failures(sessions, ops, tolerated_ops);
    check_finals(sessions, released);
    for (const auto& heal : h.heals) {
      if (heal.after_ms < 0 || heal.after_ms > w.converge_limit_ms) {
        ++r.unconverged_heals;
        example("heal at " + std::to_string(heal.heal_ms) + " ms: replicas did not agree within " +
                std::to_string(w.converge_limit_ms) + " ms");
      } else {
        r.convergence_ms.push_back(heal.after_ms);
      }
    }
  }

  void check_sessions(const std::map<std::string, std::vector<const call*>>& sessions) {
    for (const auto& [id, calls] : sessions) {
      const auto first = calls.front()->start_ms;
      const bool born_disturbed = disturbed(first);
      // The first calls at each replica, within a second of the first: a race.
      std::map<std::string, std::string> first_at;
      std::set<std::string> backends;
      bool changed_status = false;
      for (const auto* c : calls) {
        if (c->message.find("SESSION_CHANGED") != std::string::npos) changed_status = true;
        if (c->backend.empty()) continue;
        backends.insert(c->backend);
        if (c->start_ms <= first + 1000) first_at.try_emplace(c->replica, c->backend);
      }
      std::set<std::string> first_backends;
      for (const auto& [replica, b] : first_at) first_backends.insert(b);
      const bool disagreed = first_backends.size() > 1;
      const bool changed = backends.size() > 1 || changed_status;
      if (!disagreed && !changed) continue;
      this->changed.insert(id);
      if (born_disturbed) {
        tolerated_sessions.insert(id);
        ++(disagreed ? r.allowed_disagreements : r.allowed_session_changes);
        continue;
      }
      std::string names;
      for (const auto& b : backends) names += " " + b;
      if (disagreed) {
        ++r.new_session_disagreements;
        example("session " + id + " (first call at " + std::to_string(first) +
                " ms): its first calls at two replicas got two backends:" + names);
      } else {
        ++r.session_changes;
        example("session " + id + " (bound at " + std::to_string(first) + " ms) changed backend:" + names +
                (changed_status ? " (SESSION_CHANGED)" : ""));
      }
    }
  }

  void check_ops(const std::map<std::string, std::vector<const call*>>& ops, std::set<std::string>& tolerated) {
    for (const auto& [id, calls] : ops) {
      // The operation runs where its ExecutePlan went.
      const call* exec = nullptr;
      for (const auto* c : calls)
        if (c->rpc == "execute" && !c->backend.empty()) {
          exec = c;
          break;
        }
      if (!exec) continue;
      for (const auto* c : calls) {
        if (c->backend.empty() || c->backend == exec->backend) continue;
        // Another backend: allowed only where the replica it reached could
        // not learn of the operation from the one that started it.
        if (const auto why = cut_off(c->replica, exec->replica, exec->start_ms, exec->end_ms, c->start_ms);
            !why.empty()) {
          ++r.allowed_op_misroutes;
          ++r.allowed_op_misroutes_by[why];
          tolerated.insert(id);
        } else {
          ++r.op_misroutes;
          example("operation " + id + " ran on " + exec->backend + " (through " + exec->replica + ") but a " +
                  c->rpc + " at " + std::to_string(c->start_ms) + " ms through " + c->replica + " reached " +
                  c->backend);
        }
        break;  // one count per operation
      }
    }
  }

  void check_failures(const std::map<std::string, std::vector<const call*>>& sessions,
                      const std::map<std::string, std::vector<const call*>>& ops,
                      const std::set<std::string>& tolerated_ops) {
    for (const auto& c : h.calls) {
      if (c.code == 0) continue;
      const auto cls = error_class(c.message);
      if (c.probe && c.code == code_internal && cls == "INVALID_HANDLE.SESSION_NOT_FOUND" && !c.backend.empty())
        continue;  // a backend's answer to a probe (check_ops judges where it went)
      ++r.failures_by_status[std::to_string(c.code) + (cls.empty() ? "" : " " + cls)];
      bool allowed = fault_explains(c) || unsettled_explains(c);
      if (!allowed && c.code == code_internal && forgotten_handle(cls) && !c.backend.empty()) {
        // The backend lost the handle in a restart since it was made: the
        // operation, or (a clone's parent, say) the session.
        std::int64_t made = c.start_ms;
        if (!c.op.empty()) {
          auto it = ops.find(c.op);
          if (it != ops.end()) made = it->second.front()->start_ms;
          allowed = tolerated_ops.count(c.op) > 0;
        } else if (auto it = sessions.find(c.session); it != sessions.end()) {
          made = it->second.front()->start_ms;
          // Bound to two backends, as a partition allows: the second never had it.
          allowed = tolerated_sessions.count(c.session) > 0;
        }
        allowed = allowed || backend_restarted(c.backend, made - w.before_ms, c.end_ms);
        // A release the client saw fail may have closed the session on its
        // backend all the same; the client kept using it.
        allowed = allowed || (cls == "INVALID_HANDLE.SESSION_CLOSED" && release_tried(c, sessions));
      }
      if (allowed) {
        ++r.allowed_failures;
      } else {
        ++r.unexpected_failures;
        example(c.rpc + " at " + std::to_string(c.start_ms) + " ms through " + c.replica + " (session " + c.session +
                (c.op.empty() ? "" : ", operation " + c.op) + ") failed " + std::to_string(c.code) + ": " + c.message);
      }
    }
  }

  void check_finals(const std::map<std::string, std::vector<const call*>>& sessions,
                    const std::set<std::string>& released) {
    std::map<std::string, std::vector<const final_view*>> by_session;
    for (const auto& f : h.finals) by_session[f.session].push_back(&f);
    for (const auto& [id, views] : by_session) {
      std::set<std::string> named;
      bool missing = false;
      for (const auto* v : views) {
        if (v->backend.empty())
          missing = true;
        else
          named.insert(v->backend);
      }
      if (named.size() > 1) {
        ++r.final_disagreements;
        example("session " + id + ": the replicas named " + std::to_string(named.size()) + " backends at the end");
      }
      auto s = sessions.find(id);
      if (released.count(id) || s == sessions.end()) continue;
      const call* last = nullptr;  // the session's last answer from a backend
      for (const auto* c : s->second)
        if (!c->backend.empty()) last = c;  // a clone call: its new session's backend too
      if (last && named.size() == 1 && *named.begin() != last->backend && !changed.count(id)) {
        // The table moved it since its last call: its next call changes backend.
        if (disturbed(s->second.front()->start_ms)) {
          ++r.allowed_session_changes;
        } else {
          ++r.session_changes;
          example("session " + id + ": served by " + last->backend + ", the replicas name " + *named.begin() +
                  " at the end");
        }
      }
      if (!missing) continue;
      const bool served = std::any_of(s->second.begin(), s->second.end(), [](const call* c) { return c->code == 0; });
      if (!served) continue;
      if (disturbed(s->second.front()->start_ms)) {
        ++r.allowed_lost_bindings;
      } else {
        ++r.lost_bindings;
        example("session " + id + ": served, not released, missing from a live replica's table at the end");
      }
    }
  }
};

json to_json(const call& c) {
  json j{{"t", "call"}, {"start", c.start_ms}, {"end", c.end_ms}, {"replica", c.replica}, {"rpc", c.rpc},
         {"session", c.session}, {"backend", c.backend}, {"code", c.code}};
  if (!c.op.empty()) j["op"] = c.op;
  if (c.by_op) j["by_op"] = true;
  if (c.probe) j["probe"] = true;
  if (!c.message.empty()) j["message"] = c.message;
  if (!c.new_session.empty()) j["new_session"] = c.new_session;
  return j;
}

}  // namespace

std::int64_t report::convergence_percentile(double p) const {
  if (convergence_ms.empty()) return -1;
  auto v = convergence_ms;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

void write_history(const history& h, std::ostream& out) {
  out << json{{"t", "meta"}, {"seed", h.seed}, {"secs", h.secs}}.dump() << "\n";
  for (const auto& f : h.faults)
    out << json{{"t", "fault"}, {"kind", f.kind}, {"start", f.start_ms}, {"end", f.end_ms}, {"targets", f.targets}}.dump()
        << "\n";
  for (const auto& c : h.calls) out << to_json(c).dump() << "\n";
  for (const auto& x : h.heals) out << json{{"t", "heal"}, {"heal", x.heal_ms}, {"after", x.after_ms}}.dump() << "\n";
  for (const auto& f : h.finals)
    out << json{{"t", "final"}, {"session", f.session}, {"replica", f.replica}, {"backend", f.backend}}.dump() << "\n";
}

bool read_history(std::istream& in, history& h, std::string* error) {
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = json::parse(line, nullptr, false);
    const auto t = j.is_object() ? j.value("t", "") : "";
    try {
      if (t == "meta") {
        h.seed = j.at("seed").get<std::uint64_t>();
        h.secs = j.at("secs").get<std::int64_t>();
      } else if (t == "fault") {
        h.faults.push_back({j.at("kind"), j.at("start"), j.at("end"), j.at("targets")});
      } else if (t == "call") {
        call c;
        c.start_ms = j.at("start");
        c.end_ms = j.at("end");
        c.replica = j.at("replica");
        c.rpc = j.at("rpc");
        c.session = j.at("session");
        c.backend = j.at("backend");
        c.code = j.at("code");
        c.op = j.value("op", "");
        c.by_op = j.value("by_op", false);
        c.probe = j.value("probe", false);
        c.message = j.value("message", "");
        c.new_session = j.value("new_session", "");
        h.calls.push_back(std::move(c));
      } else if (t == "heal") {
        h.heals.push_back({j.at("heal"), j.at("after")});
      } else if (t == "final") {
        h.finals.push_back({j.at("session"), j.at("replica"), j.at("backend")});
      } else {
        throw std::runtime_error("no record type");
      }
    } catch (const std::exception& e) {
      if (error) *error = "history line " + std::to_string(n) + " is not a record: " + e.what();
      return false;
    }
  }
  // The calls in the order they started, whatever order the clients wrote them.
  std::stable_sort(h.calls.begin(), h.calls.end(), [](const call& a, const call& b) { return a.start_ms < b.start_ms; });
  return true;
}

report check(const history& in, const windows& w) {
  history h = in;  // the rules read each session's and operation's calls in the order they started
  std::stable_sort(h.calls.begin(), h.calls.end(), [](const call& a, const call& b) { return a.start_ms < b.start_ms; });
  checker c{h, w, {}, {}, {}};
  c.run();
  return c.r;
}

void print_report(const report& r, std::ostream& out) {
  out << "calls=" << r.calls << "\nok_calls=" << r.ok_calls << "\nsessions=" << r.sessions
      << "\noperations=" << r.operations << "\nfaults=" << r.faults << "\nsession_changes=" << r.session_changes
      << "\nop_misroutes=" << r.op_misroutes << "\nlost_bindings=" << r.lost_bindings
      << "\nnew_session_disagreements=" << r.new_session_disagreements
      << "\nunexpected_failures=" << r.unexpected_failures << "\nfinal_disagreements=" << r.final_disagreements
      << "\nunconverged_heals=" << r.unconverged_heals << "\nallowed_session_changes=" << r.allowed_session_changes
      << "\nallowed_op_misroutes=" << r.allowed_op_misroutes << "\nallowed_lost_bindings=" << r.allowed_lost_bindings
      << "\nallowed_disagreements=" << r.allowed_disagreements << "\nallowed_failures=" << r.allowed_failures
      << "\nheals=" << r.convergence_ms.size() << "\nconvergence_p50_ms=" << r.convergence_percentile(50)
      << "\nconvergence_p99_ms=" << r.convergence_percentile(99)
      << "\nconvergence_max_ms=" << r.convergence_percentile(100) << "\nviolations=" << r.violations() << "\n";
  for (const auto& [status, n] : r.failures_by_status) out << "failed{" << status << "}=" << n << "\n";
  for (const auto& [why, n] : r.allowed_op_misroutes_by) out << "allowed_op_misroutes{" << why << "}=" << n << "\n";
  for (const auto& e : r.examples) out << "violation: " << e << "\n";
}

}  // namespace scg::nemesis
