// The report of scg-bench: reads the raw records bench.sh collected and prints
// medians and ranges per path, the ratios between paths paired per round, the
// resources, the aims and the warnings; the same as JSON and Markdown on request.
#include "tools/bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace scg::bench {
namespace {

using json = nlohmann::ordered_json;

// bench.sh appends one JSON object per line to a raw file:
//   {"kind":"meta", ...}                       the machine and the settings
//   {"kind":"unary"|"h2load"|"stream","case":C,"path":P,"round":R, <load line>, <cpu fields>}
//     P is direct, scg, before (BENCH_SCG_BEFORE's scg), nginx or haproxy; for streams
//     R numbers samples (several per round). h2load lines carry rps, p50_us, p99_us,
//     rpcs (h2load's "succeeded"), errors, rpcs_total, started, and client_cpu_s
//     (h2load's CPU, from bash's `times`).
//   {"kind":"idle", "scg_idle_cores":..., "seconds":...}   scg's CPU before any load
//   {"kind":"memory", "path":P, "max_rss_kib":..., "hwm_kib":...}   a middle box under load
//   {"kind":"sessions", <sessions line>, "rss_before_kib":..., "rss_after_kib":...}
//   {"kind":"replication", "replicas", "sessions", "errors", "open_s", "visible_s"}
//   {"kind":"decisions", "phase", "entries", "rate", "errors", "before", "after", "refresh_before", "refresh_after",
//    "owner_before", "owner_after"}
//     (phase refresh, sync, sync_only: the sync's part until the joiner was ready, busy_loops;
//     records of one phase, one per repeated sync, are pooled)
//   {"kind":"soak_sample", "t_s", "rss_kib"} and {"kind":"soak", "seconds", ...}
//   {"kind":"stalled", "round":R, "stream_window_bytes", <stalled line>, <cpu fields>}
//     one per N of BENCH_STALLED and round, on a fresh scg; "error" instead when
//     scg-bench stalled itself failed
// <cpu fields> are middle_cpu_s (scg, before, nginx's master and workers, or haproxy; 0 for
// direct), fake_cpu_s, box_busy_s (all CPUs) and run_wall_s of the run, and
// backend_config_calls: the Config calls the fake counted meanwhile (-1: unknown).
// Older raw files (scg_cpu_s, scg_max_rss_kib) are read too.

/// Median and range of a few samples.
struct spread {
  double median = 0, min = 0, max = 0;
  size_t n = 0;
};

/// Non-finite values (a figure a run could not measure) are left out.
spread spread_of(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  spread out;
  out.n = values.size();
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  out.median = values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
  out.min = values.front();
  out.max = values.back();
  return out;
}

json to_json(const spread& s, int digits) {
  if (s.n == 0) return nullptr;
  return {{"median", round_to(s.median, digits)}, {"min", round_to(s.min, digits)},
          {"max", round_to(s.max, digits)}, {"n", s.n}};
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

/// "1234 (1200–1300)"; "–" when there are no samples.
std::string show(const spread& s, int digits) {
  if (s.n == 0) return "–";
  if (s.n == 1) return fixed(s.median, digits);
  return fixed(s.median, digits) + " (" + fixed(s.min, digits) + "–" + fixed(s.max, digits) + ")";
}

/// The median alone; "–" when there are no samples.
std::string show_median(const spread& s, int digits) { return s.n ? fixed(s.median, digits) : "–"; }

double num(const json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// `before` is an older scg binary (BENCH_SCG_BEFORE), only in runs that had it.
const std::vector<std::string> path_order = {"direct", "scg", "before", "nginx", "haproxy"};
/// The ratios the report shows, numerator first; each is paired per round.
const std::vector<std::pair<std::string, std::string>> ratio_pairs = {
    {"scg", "direct"}, {"scg", "before"}, {"scg", "nginx"},
    {"scg", "haproxy"}, {"nginx", "direct"}, {"haproxy", "direct"}};

/// The runs of one case: path -> round -> record.
struct case_runs {
  std::string name, kind, label;
  std::map<std::string, std::map<int, json>> paths;
  bool unary() const { return kind != "stream"; }
  const std::map<int, json>* runs(const std::string& path) const {
    auto it = paths.find(path);
    return it == paths.end() ? nullptr : &it->second;
  }
};

/// One table row: a label per column and its values.
using row = std::vector<std::string>;
using metric_fn = std::function<double(const json&)>;

std::string markdown_table(const row& header, const std::vector<row>& rows) {
  auto line = [](const row& cells) {
    std::string out = "|";
    for (const auto& c : cells) out += " " + c + " |";
    return out + "\n";
  };
  std::string out = line(header);
  out += "|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

/// Column widths count code points, so "–" and "µ" do not shift the columns.
size_t display_width(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xc0) != 0x80 ? 1 : 0;
  return n;
}

std::string text_table(const row& header, const std::vector<row>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const row& r) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], display_width(r[i]));
  };
  measure(header);
  for (const auto& r : rows) measure(r);
  auto line = [&](const row& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size() && i < width.size()) out += std::string(width[i] - display_width(r[i]) + 2, ' ');
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& r : rows) out += line(r);
  return out;
}

/// Per-round values of `metric` for one path; none when the path did not run.
std::vector<double> values(const std::map<int, json>* runs, const metric_fn& metric) {
  std::vector<double> out;
  if (runs)
    for (const auto& [round, record] : *runs) out.push_back(metric(record));
  return out;
}

/// a/b of `metric`, paired round by round.
std::vector<double> ratios(const case_runs& c, const std::string& a, const std::string& b, const metric_fn& metric) {
  std::vector<double> out;
  const auto *top = c.runs(a), *bottom = c.runs(b);
  if (!top || !bottom) return out;
  for (const auto& [round, record] : *top) {
    auto other = bottom->find(round);
    if (other == bottom->end()) continue;
    const double base = metric(other->second);
    if (base > 0 && std::isfinite(base)) out.push_back(metric(record) / base);
  }
  return out;
}

const double not_measured = std::numeric_limits<double>::quiet_NaN();

double middle_cpu(const json& r) { return r.contains("middle_cpu_s") ? num(r, "middle_cpu_s") : num(r, "scg_cpu_s"); }

/// The load generator's CPU (scg-bench's process_cpu_s also covers its start-up
/// and connecting); not measured in old raw files without it.
double client_cpu(const json& r) {
  if (r.contains("process_cpu_s")) return num(r, "process_cpu_s");
  if (r.contains("client_cpu_s")) return num(r, "client_cpu_s");
  return not_measured;
}

/// `cpu` per 100k calls (unary) or per GiB (stream).
double per_work(const json& r, double cpu, bool unary) {
  const double work = unary ? num(r, "rpcs_total") / 1e5 : num(r, "bytes") / double(1 << 30);
  return work > 0 ? cpu / work : not_measured;
}

/// CPU the rest of the machine spent during a run, in cores: everything busy
/// minus the middle box, the fake and the client.
double foreign_cores(const json& r) {
  const double wall = num(r, "run_wall_s");
  const double client = client_cpu(r);
  if (wall <= 0 || !std::isfinite(client)) return not_measured;
  return std::max(0.0, num(r, "box_busy_s") - middle_cpu(r) - num(r, "fake_cpu_s") - client) / wall;
}

/// The per-kind figures: throughput and its unit, digits, and how CPU is counted.
struct figures {
  metric_fn throughput, middle_cpu_per_work, chain_cpu_per_work, fake_cores, client_cores;
  std::string unit, cpu_unit;
};

figures figures_for(bool unary) {
  figures f;
  f.throughput = [unary](const json& r) { return num(r, unary ? "rps" : "mb_per_s"); };
  f.middle_cpu_per_work = [unary](const json& r) {
    return r.value("path", "") == "direct" ? not_measured : per_work(r, middle_cpu(r), unary);
  };
  f.chain_cpu_per_work = [unary](const json& r) {
    return per_work(r, middle_cpu(r) + num(r, "fake_cpu_s") + client_cpu(r), unary);
  };
  f.fake_cores = [](const json& r) {
    const double wall = num(r, "run_wall_s");
    return wall > 0 ? num(r, "fake_cpu_s") / wall : not_measured;
  };
  f.client_cores = [](const json& r) {
    const double wall = num(r, "wall_s") > 0 ? num(r, "wall_s") : num(r, "seconds");
    return wall > 0 && r.contains("client_cpu_s") ? num(r, "client_cpu_s") / wall : not_measured;
  };
  f.unit = unary ? " rps" : " MB/s";
  f.cpu_unit = unary ? " s/100k" : " s/GiB";
  return f;
}

/// Cumulative Prometheus buckets, [le, count] pairs as scraped; +Inf last.
using buckets = std::vector<std::pair<double, double>>;

buckets parse_buckets(const json& pairs) {
  buckets out;
  for (const auto& p : pairs) {
    const auto le = p.at(0).get<std::string>();
    out.emplace_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le), p.at(1).get<double>());
  }
  return out;
}

/// The buckets of `after` minus `before`, added up over replicas: what was
/// observed in between, everywhere.
buckets bucket_delta(const json& before, const json& after) {
  buckets sum;
  for (size_t r = 0; r < after.size(); ++r) {
    auto a = parse_buckets(after[r]);
    auto b = r < before.size() ? parse_buckets(before[r]) : buckets{};
    if (sum.empty()) sum.assign(a.size(), {0, 0});
    for (size_t i = 0; i < a.size() && i < sum.size(); ++i)
      sum[i] = {a[i].first, sum[i].second + a[i].second - (i < b.size() ? b[i].second : 0)};
  }
  return sum;
}

/// The q-quantile of cumulative buckets, interpolated linearly inside its
/// bucket as Prometheus's histogram_quantile does; the highest finite bound
/// when it falls above it; NaN when empty.
double bucket_quantile(const buckets& b, double q) {
  if (b.empty() || b.back().second <= 0) return not_measured;
  const double rank = q * b.back().second;
  double lower = 0, below = 0;
  for (const auto& [le, count] : b) {
    if (count >= rank) {
      if (!std::isfinite(le)) return lower;
      return count > below ? lower + (le - lower) * (rank - below) / (count - below) : le;
    }
    lower = std::isfinite(le) ? le : lower;
    below = count;
  }
  return lower;
}

/// What the report collects from the raw file.
struct raw_records {
  json meta = json::object(), idle = json::object(), sessions = json::object(), replication = json::object(),
       replication_delay = json::object(), sync = json::object(), soak = json::object();
  std::map<std::string, json> memory;  ///< by path
  std::vector<json> soak_samples;
  std::vector<json> stalled;  ///< stalled-readers runs, every N and round
  std::vector<json> decisions;  ///< placement decisions timed at full size, one per phase
  std::vector<json> syncs;  ///< every full sync's record, in run order
  std::vector<case_runs> cases;
};

/// A run may time several full syncs (BENCH_SYNC_REPEATS): the slowest one
/// (never ready counts as slowest) stands for them all, and each one's time
/// is kept for the report.
void add_sync(raw_records& out, const json& record) {
  auto seconds = [](const json& r) {
    const auto ready = r.value("ready_s", json());
    return ready.is_number() ? ready.get<double>() : std::numeric_limits<double>::infinity();
  };
  out.syncs.push_back(record);
  if (out.sync.empty() || seconds(record) > seconds(out.sync)) out.sync = record;
}

/// Decisions of the same phase in several windows (one per repeated sync)
/// are pooled: each window's histograms before and after are appended as if
/// from another replica, which bucket_delta adds up.
void add_decisions(raw_records& out, const json& record) {
  const auto phase = record.value("phase", "");
  auto it = std::find_if(out.decisions.begin(), out.decisions.end(),
                         [&](const json& d) { return d.value("phase", "") == phase; });
  if (it == out.decisions.end()) {
    out.decisions.push_back(record);
    return;
  }
  for (const char* key : {"before", "after", "refresh_before", "refresh_after", "owner_before", "owner_after"}) {
    if (!record.contains(key)) continue;
    if (!it->contains(key)) (*it)[key] = json::array();
    for (const auto& replica : record[key]) (*it)[key].push_back(replica);
  }
  (*it)["sessions"] = num(*it, "sessions") + num(record, "sessions");
  (*it)["errors"] = num(*it, "errors") + num(record, "errors");
  (*it)["entries"] = record.value("entries", json());
  (*it)["windows"] = it->value("windows", 1) + 1;
}

std::optional<raw_records> read_raw(const std::string& raw_path) {
  std::ifstream raw(raw_path);
  if (!raw) {
    std::fprintf(stderr, "scg-bench: cannot read %s\n", raw_path.c_str());
    return std::nullopt;
  }
  raw_records out;
  std::string text_line;
  for (int line_no = 1; std::getline(raw, text_line); ++line_no) {
    if (text_line.empty()) continue;
    auto record = json::parse(text_line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      std::fprintf(stderr, "scg-bench: %s:%d is not a JSON object\n", raw_path.c_str(), line_no);
      return std::nullopt;
    }
    const auto kind = record.value("kind", "");
    if (kind == "meta") out.meta = record;
    else if (kind == "idle") out.idle = record;
    else if (kind == "sessions") out.sessions = record;
    else if (kind == "replication") out.replication = record;
    else if (kind == "replication_delay") out.replication_delay = record;
    else if (kind == "sync") add_sync(out, record);
    else if (kind == "soak") out.soak = record;
    else if (kind == "soak_sample") out.soak_samples.push_back(record);
    else if (kind == "stalled") out.stalled.push_back(record);
    else if (kind == "decisions") add_decisions(out, record);
    else if (kind == "memory" && record.contains("path")) out.memory[record.value("path", "")] = record;
    else if (kind == "memory")  // before the other paths existed
      out.memory["scg"] = {{"max_rss_kib", num(record, "scg_max_rss_kib")}, {"hwm_kib", num(record, "scg_hwm_kib")}};
    else if (kind == "unary" || kind == "h2load" || kind == "stream") {
      const auto name = record.value("case", kind);
      auto it = std::find_if(out.cases.begin(), out.cases.end(), [&](const case_runs& c) { return c.name == name; });
      if (it == out.cases.end()) {
        out.cases.push_back({name, kind, record.value("label", name), {}});
        it = std::prev(out.cases.end());
      }
      it->paths[record.value("path", "")][record.value("round", 0)] = record;
    }
    out.meta.erase("kind");
  }
  for (auto* j : {&out.idle, &out.sessions, &out.replication, &out.replication_delay, &out.sync, &out.soak})
    j->erase("kind");
  return out;
}

/// Warnings about the trustworthiness of the figures: failed calls, a load
/// generator whose count the backend does not confirm, a backend that is no
/// faster than the proxies in front of it, other load on the machine.
std::vector<std::string> check_runs(const raw_records& raw) {
  std::vector<std::string> warnings;
  for (const auto& c : raw.cases) {
    if (!c.unary()) continue;
    for (const auto& [path, runs] : c.paths)
      for (const auto& [round, r] : runs) {
        const std::string where = c.label + " via " + path + " round " + std::to_string(round) + ": ";
        const double backend = r.contains("backend_config_calls") ? num(r, "backend_config_calls") : -1;
        if (c.kind == "h2load") {
          // h2load counts a gRPC error (HTTP 200 with a grpc-status) as a success:
          // only the backend's own count shows whether the calls reached it.
          if (backend >= 0 && backend < num(r, "rpcs"))
            warnings.push_back("MISMATCH " + where + "h2load counted " + fixed(num(r, "rpcs"), 0) +
                               " successes, the backend answered only " + fixed(backend, 0) + " Config calls");
          if (num(r, "errors") > 0) warnings.push_back(where + "h2load saw " + fixed(num(r, "errors"), 0) + " failed requests");
          continue;
        }
        const double answered = num(r, "rpcs_total") - num(r, "errors_total");
        if ((backend >= 0 && backend < answered) || num(r, "errors_total") > 0)
          warnings.push_back(where + fixed(num(r, "errors_total"), 0) + " failed calls, backend counted " +
                             fixed(backend, 0) + " for " + fixed(answered, 0) + " answered");
      }
    // The backend must not be the bottleneck: direct well above every proxy.
    const auto f = figures_for(c.unary());
    const auto direct = spread_of(values(c.runs("direct"), f.throughput));
    for (const auto& path : path_order) {
      if (path == "direct") continue;
      const auto via = spread_of(values(c.runs(path), f.throughput));
      if (direct.n && via.n && direct.median < 1.2 * via.median)
        warnings.push_back(c.label + ": direct (" + fixed(direct.median, 0) + ") is not well above " + path + " (" +
                           fixed(via.median, 0) + "): the backend or the client may be the bottleneck");
    }
  }
  if (num(raw.sessions, "errors") > 0) warnings.push_back(fixed(num(raw.sessions, "errors"), 0) + " session opens failed");
  if (num(raw.replication, "errors") > 0)
    warnings.push_back(fixed(num(raw.replication, "errors"), 0) + " session opens failed in the replication run");
  if (!raw.replication.empty() && raw.replication.value("complete", true) == false)
    warnings.push_back("replication: the other replica never showed every binding within the time limit");
  for (const auto& r : raw.stalled) {
    const std::string where = "stalled readers N=" + fixed(num(r, "stalled"), 0) + " round " +
                              std::to_string(r.value("round", 0)) + ": ";
    if (r.contains("error")) {
      warnings.push_back(where + r.value("error", ""));
      continue;
    }
    const double unary_failed = num(r, "errors"), stream_failed = num(r, "stream_errors") + num(r, "stream_timeouts");
    if (unary_failed > 0 || stream_failed > 0 || num(r, "stream_bytes") <= 0)
      warnings.push_back(where + fixed(unary_failed, 0) + " unary calls failed (" + fixed(num(r, "timeouts"), 0) +
                         " timed out), " + fixed(stream_failed, 0) + " streams failed, stream " +
                         fixed(num(r, "mb_per_s"), 1) + " MB/s: the well-behaved clients starved");
    if (num(r, "stalled_started") < num(r, "stalled"))
      warnings.push_back(where + "only " + fixed(num(r, "stalled_started"), 0) + " of " + fixed(num(r, "stalled"), 0) +
                         " stalled readers got their stream started");
  }
  if (num(raw.meta, "quick") > 0) warnings.push_back("quick mode: a smoke test, too short to judge the aims");
  std::vector<double> foreign;
  for (const auto& c : raw.cases)
    for (const auto& [path, runs] : c.paths)
      for (const auto& [round, r] : runs) foreign.push_back(foreign_cores(r));
  const auto s_foreign = spread_of(foreign);
  if (s_foreign.n && s_foreign.median > 0.3)
    warnings.push_back("other work on the machine took " + fixed(s_foreign.median, 2) +
                       " cores (median over runs): the figures are disturbed");
  return warnings;
}

/// The report's tables, each with its header, and the JSON beside them.
struct report_tables {
  std::vector<std::pair<row, std::vector<row>>> tables;
  json report;
};

/// Per path and per ratio, for every case.
std::pair<row, std::vector<row>> detail_table(const raw_records& raw, json& cases_json) {
  const row header = {"workload", "path", "throughput", "p50 µs", "p99 µs", "errors", "middle-box CPU",
                      "chain CPU", "fake cores", "client cores", "foreign cores"};
  const metric_fn p50 = [](const json& r) { return num(r, "p50_us"); };
  const metric_fn p99 = [](const json& r) { return num(r, "p99_us"); };
  const metric_fn errors = [](const json& r) { return num(r, "errors"); };
  std::vector<row> rows;
  for (const auto& c : raw.cases) {
    const auto f = figures_for(c.unary());
    json entry = {{"case", c.name}, {"label", c.label}, {"kind", c.kind}, {"paths", json::object()},
                  {"ratios", json::object()}};
    for (const auto& path : path_order) {
      const auto* runs = c.runs(path);
      if (!runs) continue;
      const auto s_tp = spread_of(values(runs, f.throughput)), s_p50 = spread_of(values(runs, p50)),
                 s_p99 = spread_of(values(runs, p99)), s_mid = spread_of(values(runs, f.middle_cpu_per_work)),
                 s_chain = spread_of(values(runs, f.chain_cpu_per_work)),
                 s_fake = spread_of(values(runs, f.fake_cores)), s_client = spread_of(values(runs, f.client_cores)),
                 s_foreign = spread_of(values(runs, foreign_cores));
      double error_sum = 0;
      for (double e : values(runs, errors)) error_sum += e;
      json p = {{c.unary() ? "rps" : "mb_per_s", to_json(s_tp, 1)},
                {"errors", error_sum},
                {c.unary() ? "middle_cpu_s_per_100k_rpcs" : "middle_cpu_s_per_gib", to_json(s_mid, 3)},
                {c.unary() ? "chain_cpu_s_per_100k_rpcs" : "chain_cpu_s_per_gib", to_json(s_chain, 3)},
                {"fake_cpu_cores", to_json(s_fake, 2)},
                {"client_cpu_cores", to_json(s_client, 2)},
                {"foreign_cpu_cores", to_json(s_foreign, 2)}};
      if (c.unary()) {
        p["p50_us"] = to_json(s_p50, 0);
        p["p99_us"] = to_json(s_p99, 0);
      }
      entry["paths"][path] = p;
      rows.push_back({c.label, path, show(s_tp, 0) + f.unit, c.unary() ? show(s_p50, 0) : "",
                      c.unary() ? show(s_p99, 0) : "", fixed(error_sum, 0),
                      s_mid.n ? show(s_mid, 2) + f.cpu_unit : "–", s_chain.n ? show(s_chain, 2) + f.cpu_unit : "–",
                      show(s_fake, 2), show(s_client, 2), show(s_foreign, 2)});
    }
    for (const auto& [a, b] : ratio_pairs) {
      const auto r_tp = spread_of(ratios(c, a, b, f.throughput));
      if (!r_tp.n) continue;
      const auto r_p50 = spread_of(ratios(c, a, b, p50)), r_p99 = spread_of(ratios(c, a, b, p99)),
                 r_cpu = spread_of(ratios(c, a, b, f.middle_cpu_per_work));
      json r = {{c.unary() ? "rps" : "mb_per_s", to_json(r_tp, 3)}};
      if (c.unary()) {
        r["p50_us"] = to_json(r_p50, 3);
        r["p99_us"] = to_json(r_p99, 3);
      }
      if (r_cpu.n) r["middle_cpu"] = to_json(r_cpu, 3);
      entry["ratios"][a + "/" + b] = r;
      rows.push_back({c.label, a + "/" + b, show(r_tp, 2), c.unary() ? show(r_p50, 2) : "",
                      c.unary() ? show(r_p99, 2) : "", "", r_cpu.n ? show(r_cpu, 2) : "", "", "", "", ""});
    }
    cases_json.push_back(entry);
  }
  return {header, rows};
}

/// One line per workload and resource: every path's medians and the ratios
/// (`before` and its ratio only when the run had that path).
std::pair<row, std::vector<row>> summary_table(const raw_records& raw, const json& report) {
  const bool before = raw.memory.count("before") ||
                      std::any_of(raw.cases.begin(), raw.cases.end(),
                                  [](const case_runs& c) { return c.runs("before") != nullptr; });
  std::vector<std::string> paths;
  for (const auto& p : path_order)
    if (p != "before" || before) paths.push_back(p);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [a, b] : ratio_pairs)
    if (!(a == "haproxy" && b == "direct") && (b != "before" || before)) pairs.emplace_back(a, b);
  row header = {"workload"};
  for (const auto& p : paths) header.push_back(p);
  for (const auto& [a, b] : pairs) header.push_back(a + "/" + b);
  std::vector<row> rows;
  auto add = [&](const std::string& label, const std::function<std::string(const std::string&)>& at,
                 const std::function<std::string(const std::string&, const std::string&)>& ratio) {
    row r = {label};
    for (const auto& p : paths) r.push_back(at(p));
    for (const auto& [a, b] : pairs) r.push_back(ratio(a, b));
    rows.push_back(r);
  };
  for (const auto& c : raw.cases) {
    const auto f = figures_for(c.unary());
    add(c.label + (c.unary() ? " rps" : " MB/s"),
        [&](const std::string& p) { return show_median(spread_of(values(c.runs(p), f.throughput)), 0); },
        [&](const std::string& a, const std::string& b) { return show_median(spread_of(ratios(c, a, b, f.throughput)), 2); });
    if (c.unary())
      add(c.label + " p99 µs",
          [&](const std::string& p) {
            return show_median(spread_of(values(c.runs(p), [](const json& r) { return num(r, "p99_us"); })), 0);
          },
          [&](const std::string& a, const std::string& b) {
            return show_median(spread_of(ratios(c, a, b, [](const json& r) { return num(r, "p99_us"); })), 2);
          });
    add(c.label + " middle CPU" + f.cpu_unit,
        [&](const std::string& p) { return show_median(spread_of(values(c.runs(p), f.middle_cpu_per_work)), 2); },
        [&](const std::string& a, const std::string& b) {
          return show_median(spread_of(ratios(c, a, b, f.middle_cpu_per_work)), 2);
        });
  }
  if (!raw.memory.empty()) {
    auto peak = [&](const std::string& p) -> std::optional<double> {
      auto it = raw.memory.find(p);
      if (it == raw.memory.end()) return std::nullopt;
      return std::max(num(it->second, "max_rss_kib"), num(it->second, "hwm_kib")) / 1024;
    };
    add("peak RSS under load MiB",
        [&](const std::string& p) { return peak(p) ? fixed(*peak(p), 1) : "–"; },
        [&](const std::string& a, const std::string& b) {
          return peak(a) && peak(b) && *peak(b) > 0 ? fixed(*peak(a) / *peak(b), 2) : "–";
        });
  }
  auto scg_only = [&](const std::string& label, const std::string& value) {
    add(label, [&](const std::string& p) { return p == "scg" ? value : "–"; },
        [](const std::string&, const std::string&) { return std::string("–"); });
  };
  if (report.contains("sessions"))
    scg_only("RSS per idle session KiB", fixed(report["sessions"].value("kib_per_session", 0.0), 2));
  if (report.contains("replication"))
    scg_only("replicated bindings/s", fixed(report["replication"].value("bindings_per_s", 0.0), 0));
  return {header, rows};
}

/// The stalled-readers runs, one row per N: the well-behaved load and its
/// ratio to N = 0 of the same round, and scg's RSS against the bound
/// N x (stream window + one response message) + its RSS at N = 0.
std::pair<row, std::vector<row>> stalled_table(const raw_records& raw, json& report) {
  std::map<int64_t, std::map<int, json>> by_n;  // N -> round -> record
  for (const auto& r : raw.stalled)
    if (!r.contains("error")) by_n[static_cast<int64_t>(num(r, "stalled"))][r.value("round", 0)] = r;
  const std::map<int, json>* base = by_n.count(0) ? &by_n[0] : nullptr;
  const metric_fn rps = [](const json& r) { return num(r, "rps"); };
  const metric_fn p99_ms = [](const json& r) {
    return r.contains("p99_us") && r["p99_us"].is_number() ? num(r, "p99_us") / 1000 : not_measured;
  };
  const metric_fn mb_per_s = [](const json& r) { return num(r, "mb_per_s"); };
  /// metric(N) / metric(0), round by round.
  auto vs_base = [&](const std::map<int, json>& runs, const metric_fn& metric) {
    std::vector<double> out;
    if (!base) return out;
    for (const auto& [round, r] : runs) {
      auto b = base->find(round);
      if (b == base->end()) continue;
      const double v = metric(r), bv = metric(b->second);
      if (bv > 0 && std::isfinite(bv) && std::isfinite(v)) out.push_back(v / bv);
    }
    return out;
  };
  const row header = {"stalled readers", "unary rps", "× N=0", "unary p99 ms", "× N=0", "unary failed (timed out)",
                      "stream MB/s", "× N=0", "streams done / failed", "scg RSS max", "bound", "RSS",
                      "stalled started / open at end"};
  std::vector<row> rows;
  report["stalled"] = json::array();
  for (const auto& [n, runs] : by_n) {
    const auto s_rps = spread_of(values(&runs, rps)), s_p99 = spread_of(values(&runs, p99_ms)),
               s_mbs = spread_of(values(&runs, mb_per_s));
    const auto r_rps = spread_of(vs_base(runs, rps)), r_p99 = spread_of(vs_base(runs, p99_ms)),
               r_mbs = spread_of(vs_base(runs, mb_per_s));
    double unary_failed = 0, timeouts = 0, streams_done = 0, stream_failed = 0;
    double started = num(runs.begin()->second, "stalled"), open_at_end = started;
    // The round whose RSS is highest, with its own bound; within only if every round is.
    double rss_max = 0, bound_at_max = not_measured;
    bool within = true, bound_known = base != nullptr;
    for (const auto& [round, r] : runs) {
      unary_failed += num(r, "errors");
      timeouts += num(r, "timeouts");
      streams_done += num(r, "streams");
      stream_failed += num(r, "stream_errors") + num(r, "stream_timeouts");
      started = std::min(started, num(r, "stalled_started"));
      open_at_end = std::min(open_at_end, num(r, "stalled_open_at_end"));
      const double window = r.contains("stream_window_bytes") ? num(r, "stream_window_bytes") : double(4 << 20);
      const double rss = num(r, "rss_max_kib") / 1024;
      double bound = not_measured;
      if (base && base->count(round))
        bound = static_cast<double>(n) * (window + num(r, "message_bytes")) / 1048576 +
                num(base->at(round), "rss_max_kib") / 1024;
      else
        bound_known = false;
      if (std::isfinite(bound) && rss > bound) within = false;
      if (rss >= rss_max) rss_max = rss, bound_at_max = bound;
    }
    const std::string verdict = !bound_known ? "–" : within ? "within" : "OVER";
    report["stalled"].push_back({{"stalled", n},
                                 {"rounds", runs.size()},
                                 {"rps", to_json(s_rps, 1)},
                                 {"rps_vs_0", to_json(r_rps, 3)},
                                 {"p99_ms", to_json(s_p99, 2)},
                                 {"p99_vs_0", to_json(r_p99, 3)},
                                 {"unary_failed", unary_failed},
                                 {"unary_timeouts", timeouts},
                                 {"mb_per_s", to_json(s_mbs, 1)},
                                 {"mb_per_s_vs_0", to_json(r_mbs, 3)},
                                 {"streams_done", streams_done},
                                 {"streams_failed", stream_failed},
                                 {"rss_max_mib", round_to(rss_max, 1)},
                                 {"rss_bound_mib", std::isfinite(bound_at_max) ? json(round_to(bound_at_max, 1))
                                                                               : json(nullptr)},
                                 {"rss_within_bound", bound_known ? json(within) : json(nullptr)},
                                 {"stalled_started", started},
                                 {"stalled_open_at_end", open_at_end}});
    rows.push_back({"N=" + std::to_string(n), show(s_rps, 0), n ? show(r_rps, 2) : "",
                    s_p99.n ? show(s_p99, 1) : "none OK", n ? show(r_p99, 2) : "",
                    fixed(unary_failed, 0) + " (" + fixed(timeouts, 0) + ")", show(s_mbs, 0), n ? show(r_mbs, 2) : "",
                    fixed(streams_done, 0) + " / " + fixed(stream_failed, 0), fixed(rss_max, 1) + " MiB",
                    std::isfinite(bound_at_max) && n ? fixed(bound_at_max, 1) + " MiB" : "", n ? verdict : "baseline",
                    n ? fixed(started, 0) + " / " + fixed(open_at_end, 0) : ""});
  }
  return {header, rows};
}

/// Growth of scg's RSS over a soak: the first minute against the last.
std::pair<row, std::vector<row>> soak_table(const raw_records& raw, json& report) {
  std::vector<double> first, last;
  double end = 0;
  for (const auto& s : raw.soak_samples) end = std::max(end, num(s, "t_s"));
  const double window = std::min(60.0, end / 2);  // short soaks: halves
  for (const auto& s : raw.soak_samples) {
    if (num(s, "t_s") <= window) first.push_back(num(s, "rss_kib") / 1024);
    if (num(s, "t_s") >= end - window) last.push_back(num(s, "rss_kib") / 1024);
  }
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // Least-squares slope over every sample, in MiB per minute.
  double slope = 0;
  {
    double st = 0, sv = 0, n = 0;
    for (const auto& s : raw.soak_samples) st += num(s, "t_s"), sv += num(s, "rss_kib") / 1024, n += 1;
    double cov = 0, var = 0;
    for (const auto& s : raw.soak_samples) {
      const double dt = num(s, "t_s") - st / n;
      cov += dt * (num(s, "rss_kib") / 1024 - sv / n);
      var += dt * dt;
    }
    if (var > 0) slope = cov / var * 60;
  }
  const double a = mean(first), b = mean(last), growth = b - a;
  const double ma = median(first), mb = median(last);
  const auto all = spread_of([&] {
    std::vector<double> v;
    for (const auto& s : raw.soak_samples) v.push_back(num(s, "rss_kib") / 1024);
    return v;
  }());
  report["soak"] = raw.soak;
  report["soak"]["rss_first_window_mib"] = round_to(a, 1);
  report["soak"]["rss_last_window_mib"] = round_to(b, 1);
  report["soak"]["rss_growth_mib"] = round_to(growth, 1);
  report["soak"]["rss_growth_pct"] = round_to(a > 0 ? growth / a * 100 : 0, 1);
  report["soak"]["rss_max_mib"] = round_to(all.max, 1);
  report["soak"]["rss_first_window_median_mib"] = round_to(ma, 1);
  report["soak"]["rss_last_window_median_mib"] = round_to(mb, 1);
  report["soak"]["rss_slope_mib_per_min"] = round_to(slope, 3);
  report["soak"]["window_s"] = round_to(window, 0);
  report["soak"]["samples"] = raw.soak_samples.size();
  const std::string w = fixed(window, 0) + " s";
  std::vector<row> rows = {
      {"soak length", fixed(num(raw.soak, "seconds"), 0) + " s, " + std::to_string(raw.soak_samples.size()) + " RSS samples"},
      {"unary calls OK (failed)", fixed(num(raw.soak, "unary_rpcs"), 0) + " (" + fixed(num(raw.soak, "unary_errors"), 0) + ")"},
      {"streams OK (failed)", fixed(num(raw.soak, "streams"), 0) + " (" + fixed(num(raw.soak, "stream_failures"), 0) + ")"},
      {"scg RSS, mean of the first " + w, fixed(a, 1) + " MiB"},
      {"scg RSS, mean of the last " + w, fixed(b, 1) + " MiB"},
      {"growth", (growth >= 0 ? "+" : "") + fixed(growth, 1) + " MiB (" + fixed(a > 0 ? growth / a * 100 : 0, 1) + " %)"},
      // Medians leave out samples taken while a stream's windows were full.
      {"scg RSS, median of the first / last " + w, fixed(ma, 1) + " / " + fixed(mb, 1) + " MiB"},
      {"least-squares slope over all samples", fixed(slope, 3) + " MiB per minute"},
      {"scg RSS max", fixed(all.max, 1) + " MiB"}};
  return {{"soak", "value"}, rows};
}

}  // namespace

int run_report(cli_args& args) {
  const auto raw_path = args.text("raw");
  const auto json_path = args.text("json", "");
  const auto markdown_path = args.text("markdown", "");
  if (!args.finish()) return 2;
  const auto parsed = read_raw(raw_path);
  if (!parsed) return 1;
  const auto& raw = *parsed;

  json report = {{"meta", raw.meta}, {"cases", json::array()}};
  const auto warnings = check_runs(raw);
  report["warnings"] = warnings;
  std::vector<std::pair<row, std::vector<row>>> tables;
  if (!raw.cases.empty()) tables.push_back(detail_table(raw, report["cases"]));

  // Memory, sessions, replication.
  std::vector<row> resource_rows;
  if (!raw.idle.empty()) {
    report["scg_idle_cores"] = num(raw.idle, "scg_idle_cores");
    resource_rows.push_back({"scg CPU while idle", fixed(num(raw.idle, "scg_idle_cores"), 3) + " cores"});
  }
  for (const auto& path : path_order) {
    auto it = raw.memory.find(path);
    if (it == raw.memory.end()) continue;
    const double max_rss = num(it->second, "max_rss_kib"), hwm = num(it->second, "hwm_kib");
    report["memory"][path] = {{"max_rss_mib", round_to(max_rss / 1024, 1)}, {"hwm_mib", round_to(hwm / 1024, 1)}};
    resource_rows.push_back({path + " RSS under load: sampled max VmRSS / VmHWM",
                             fixed(max_rss / 1024, 1) + " / " + fixed(hwm / 1024, 1) + " MiB"});
  }
  std::optional<double> kib_per_session;
  if (!raw.sessions.empty()) {
    const auto& s = raw.sessions;
    const double opened = num(s, "sessions"), before = num(s, "rss_before_kib"), after = num(s, "rss_after_kib");
    if (opened > 0) kib_per_session = (after - before) / opened;
    report["sessions"] = {{"opened", opened},
                          {"errors", num(s, "errors")},
                          {"seconds", num(s, "seconds")},
                          {"rss_before_mib", round_to(before / 1024, 1)},
                          {"rss_after_mib", round_to(after / 1024, 1)},
                          {"kib_per_session", round_to(kib_per_session.value_or(0), 2)}};
    resource_rows.push_back({"idle sessions opened via scg (errors)", fixed(opened, 0) + " (" +
                                                                          fixed(num(s, "errors"), 0) + ") in " +
                                                                          fixed(num(s, "seconds"), 1) + " s"});
    resource_rows.push_back({"scg RSS before → after", fixed(before / 1024, 1) + " → " + fixed(after / 1024, 1) + " MiB"});
    resource_rows.push_back({"RSS per idle session", fixed(kib_per_session.value_or(0), 2) + " KiB"});
  }
  if (!raw.replication.empty()) {
    const auto& r = raw.replication;
    const double n = num(r, "sessions"), visible = num(r, "visible_s");
    report["replication"] = r;
    report["replication"]["bindings_per_s"] = round_to(visible > 0 ? n / visible : 0, 1);
    report["replication"]["lag_after_last_open_s"] = round_to(std::max(0.0, visible - num(r, "open_s")), 3);
    resource_rows.push_back({"replication: new bindings on replica 1 seen on replica 2",
                             fixed(n, 0) + " in " + fixed(visible, 2) + " s = " +
                                 fixed(visible > 0 ? n / visible : 0, 0) + " bindings/s (" +
                                 fixed(num(r, "replicas"), 0) + " replicas; opening took " +
                                 fixed(num(r, "open_s"), 2) + " s, lag after the last " +
                                 fixed(std::max(0.0, visible - num(r, "open_s")), 2) + " s)"});
  }
  std::optional<double> delay_p99_ms, sync_s, bytes_per_entry;
  double sync_entries = 0;
  std::map<std::string, double> decision_p99_ms;  // by phase
  if (!raw.replication_delay.empty()) {
    const auto& d = raw.replication_delay;
    const auto delta = bucket_delta(d.value("before", json::array()), d.value("after", json::array()));
    const double p50 = bucket_quantile(delta, 0.5) * 1000, p99 = bucket_quantile(delta, 0.99) * 1000;
    const double observed = delta.empty() ? 0 : delta.back().second;
    if (std::isfinite(p99)) delay_p99_ms = p99;
    report["replication_delay"] = {{"rate", num(d, "rate")},         {"sessions", num(d, "sessions")},
                                   {"errors", num(d, "errors")},     {"observed", observed},
                                   {"p50_ms", round_to(p50, 2)},     {"p99_ms", round_to(p99, 2)}};
    resource_rows.push_back({"binding visible at the other replicas, p50 / p99",
                             fixed(p50, 1) + " / " + fixed(p99, 1) + " ms (" + fixed(num(d, "rate"), 0) +
                                 " new sessions/s, " + fixed(observed, 0) + " arrivals over " +
                                 fixed(num(d, "replicas"), 0) + " replicas)"});
  }
  if (!raw.sync.empty()) {
    const auto& y = raw.sync;
    const double entries = num(y, "entries"), rss = num(y, "rss_kib"), empty = num(y, "empty_rss_kib");
    sync_entries = entries;
    if (y.contains("ready_s") && y["ready_s"].is_number()) sync_s = num(y, "ready_s");
    if (entries > 0) bytes_per_entry = (rss - empty) * 1024 / entries;
    report["sync"] = y;
    report["sync"]["rss_bytes_per_entry"] = round_to(bytes_per_entry.value_or(0), 1);
    // Every sync's time (and the host's steal over its window), when the
    // run timed several.
    std::string each;
    json ready_each = json::array();
    for (const auto& one : raw.syncs) {
      const auto ready = one.value("ready_s", json());
      ready_each.push_back(ready);
      each += (each.empty() ? "" : ", ") + (ready.is_number() ? fixed(ready.get<double>(), 2) + " s" : std::string("never"));
      if (num(one, "steal_s") > 0) each += " (steal " + fixed(num(one, "steal_s"), 2) + " s)";
    }
    if (raw.syncs.size() > 1) report["sync"]["ready_s_each"] = ready_each;
    resource_rows.push_back(
        {"full sync to a joining replica: entries, time to ready",
         fixed(entries, 0) + " in " + (sync_s ? fixed(*sync_s, 2) + " s" : std::string("never")) +
             (raw.syncs.size() > 1 ? " (the slowest of " + std::to_string(raw.syncs.size()) + " joins: " + each +
                                         "; its CPU and RSS below)"
                                   : "")});
    if (y.contains("joiner_cpu_s"))
      resource_rows.push_back({"CPU until ready: the joining replica's, the seed's",
                               fixed(num(y, "joiner_cpu_s"), 2) + " s, " + fixed(num(y, "seed_cpu_s"), 2) + " s"});
    resource_rows.push_back({"bytes received until ready (from all peers by the end)",
                             fixed(num(y, "bytes_until_ready") / 1048576, 1) + " MiB (" +
                                 fixed(num(y, "bytes_all_peers") / 1048576, 1) + " MiB), " +
                                 fixed(entries > 0 ? num(y, "bytes_until_ready") / entries : 0, 0) + " bytes per entry"});
    resource_rows.push_back({"joined replica's RSS over an empty one, per entry",
                             fixed(rss / 1024, 1) + " − " + fixed(empty / 1024, 1) + " MiB = " +
                                 fixed(bytes_per_entry.value_or(0), 0) + " bytes"});
    if (y.contains("heap_bytes") && y["heap_bytes"].is_number() && entries > 0) {
      const double heap = num(y, "heap_bytes"), empty_heap = num(y, "empty_heap_bytes");
      report["sync"]["heap_bytes_per_entry"] = round_to((heap - empty_heap) / entries, 1);
      resource_rows.push_back({"joined replica's live heap over an empty one, per entry",
                               fixed(heap / 1048576, 1) + " − " + fixed(empty_heap / 1048576, 1) + " MiB = " +
                                   fixed((heap - empty_heap) / entries, 0) + " bytes"});
    }
  }
  for (const auto& d : raw.decisions) {
    const auto waits = bucket_delta(d.value("before", json::array()), d.value("after", json::array()));
    const auto passes = bucket_delta(d.value("refresh_before", json::array()), d.value("refresh_after", json::array()));
    const double p50 = bucket_quantile(waits, 0.5) * 1000, p99 = bucket_quantile(waits, 0.99) * 1000;
    const double pass_p99 = bucket_quantile(passes, 0.99) * 1000;
    const auto owner = bucket_delta(d.value("owner_before", json::array()), d.value("owner_after", json::array()));
    const double owner_p99 = bucket_quantile(owner, 0.99) * 1000, asked = owner.empty() ? 0 : owner.back().second;
    const double decided = waits.empty() ? 0 : waits.back().second, pass_count = passes.empty() ? 0 : passes.back().second;
    const auto phase = d.value("phase", "");
    if (decided > 0 && std::isfinite(p99)) decision_p99_ms[phase] = p99;
    report["decisions"][phase] = {{"entries", num(d, "entries")}, {"rate", num(d, "rate")},
                                  {"errors", num(d, "errors")},   {"decided", decided},
                                  {"p50_ms", round_to(p50, 2)},   {"p99_ms", round_to(p99, 2)},
                                  {"refresh_passes", pass_count}, {"refresh_pass_p99_ms", round_to(pass_p99, 1)},
                                  {"owner_asked", asked},         {"owner_answer_p99_ms", round_to(owner_p99, 2)},
                                  {"windows", d.value("windows", 1)}};
    const std::string during = phase == "busy_loops"  ? "while a busy loop runs on every core (control)"
                               : phase == "sync_only" ? "from the joining replica's start to its readiness"
                                                      : "during " + phase;
    resource_rows.push_back({"placement decision at the seed " + during + ", p50 / p99",
                             fixed(p50, 2) + " / " + fixed(p99, 2) + " ms (" + fixed(decided, 0) + " decisions, " +
                                 fixed(num(d, "rate"), 0) + "/s, " + fixed(num(d, "entries"), 0) + " bindings, " +
                                 fixed(num(d, "errors"), 0) + " errors; " +
                                 (d.contains("windows") ? "pooled over " + fixed(num(d, "windows"), 0) + " syncs; " : "") +
                                 fixed(asked, 0) +
                                 " asked of their owner, its answer p99 " + fixed(owner_p99, 2) + " ms; " +
                                 fixed(pass_count, 0) + " refresh passes, p99 " + fixed(pass_p99, 0) + " ms)"});
  }
  if (!resource_rows.empty()) tables.push_back({{"resources", "value"}, resource_rows});
  if (!raw.soak_samples.empty()) tables.push_back(soak_table(raw, report));
  if (!raw.stalled.empty()) tables.push_back(stalled_table(raw, report));

  // The aims.
  std::optional<double> unary32_ratio, stream_ratio, rss_mib;
  for (const auto& c : raw.cases) {
    const auto r = spread_of(ratios(c, "scg", "direct", figures_for(c.unary()).throughput));
    if (!r.n) continue;
    if (c.kind == "stream") stream_ratio = r.median;
    else if (c.kind == "unary" && c.runs("direct") && c.runs("direct")->begin()->second.value("concurrency", 0) == 32)
      unary32_ratio = r.median;
  }
  if (auto it = raw.memory.find("scg"); it != raw.memory.end())
    rss_mib = std::max(num(it->second, "max_rss_kib"), num(it->second, "hwm_kib")) / 1024;
  std::vector<row> aim_rows;
  auto aim = [&](const std::string& name, std::optional<double> measured, double limit, bool at_least,
                 const std::string& unit, int digits) {
    if (!measured) return;
    const bool met = at_least ? *measured >= limit : *measured <= limit;
    const double margin = at_least ? *measured / limit - 1 : 1 - *measured / limit;  // > 0: headroom
    report["aims"].push_back({{"aim", name}, {"measured", round_to(*measured, 3)}, {"limit", limit},
                              {"met", met}, {"margin", round_to(margin, 3)}});
    aim_rows.push_back({name, fixed(*measured, digits) + unit, (at_least ? "≥ " : "≤ ") + fixed(limit, digits) + unit,
                        met ? "met" : "MISSED", (margin >= 0 ? "+" : "") + fixed(margin * 100, 1) + " %"});
  };
  // Issue #2's aims (against direct), then issue #5's (against nginx, same run).
  aim("unary c=32 via scg / direct", unary32_ratio, 0.4, true, "×", 2);
  aim("stream via scg / direct", stream_ratio, 0.65, true, "×", 2);
  aim("scg peak RSS under load", rss_mib, 64, false, " MiB", 1);
  aim("RSS per idle session", kib_per_session, 2, false, " KiB", 2);
  aim("binding visible at other replicas, p99", delay_p99_ms, 10, false, " ms", 1);
  // Issue #3's sync aim is 2 s for its 100,000 bindings; issue #16's, 5 s for a million.
  aim("full sync of the entries", sync_s, sync_entries >= 1e6 ? 5 : 2, false, " s", 2);
  // The sync's aim is judged on the decisions made while it ran (sync_only)
  // when the run marked its end; "sync" is the whole window around it.
  for (const auto& phase : {"refresh", "sync_only", "sync"}) {
    auto it = decision_p99_ms.find(phase);
    if (it == decision_p99_ms.end()) continue;
    if (std::string(phase) == "sync" && decision_p99_ms.count("sync_only")) continue;
    aim(std::string("placement decision p99 during ") + (std::string(phase) == "sync_only" ? "sync" : phase),
        it->second, 5, false, " ms", 2);
  }
  aim("memory per replicated entry", bytes_per_entry, 300, false, " B", 0);
  auto vs_nginx = [&](const std::string& kind, int concurrency, const metric_fn& metric) -> std::optional<double> {
    for (const auto& c : raw.cases) {
      if (c.kind != kind || !c.runs("scg") || !c.runs("nginx")) continue;
      if (kind == "unary" && c.runs("scg")->begin()->second.value("concurrency", 0) != concurrency) continue;
      const auto r = spread_of(ratios(c, "scg", "nginx", metric));
      if (r.n) return r.median;
    }
    return std::nullopt;
  };
  const metric_fn rps = [](const json& r) { return num(r, "rps"); };
  const metric_fn p99_us = [](const json& r) { return num(r, "p99_us"); };
  const metric_fn mb_per_s = [](const json& r) { return num(r, "mb_per_s"); };
  const metric_fn cpu_per_gib = figures_for(false).middle_cpu_per_work;
  aim("unary c=1 via scg / nginx", vs_nginx("unary", 1, rps), 0.9, true, "×", 2);
  aim("unary c=32 via scg / nginx", vs_nginx("unary", 32, rps), 1.2, true, "×", 2);
  aim("unary c=256 via scg / nginx", vs_nginx("unary", 256, rps), 1.2, true, "×", 2);
  aim("unary c=32 p99, scg / nginx", vs_nginx("unary", 32, p99_us), 1.0, false, "×", 2);
  aim("unary c=256 p99, scg / nginx", vs_nginx("unary", 256, p99_us), 1.0, false, "×", 2);
  aim("stream MB/s, scg / nginx", vs_nginx("stream", 0, mb_per_s), 1.0, true, "×", 2);
  aim("stream CPU per GiB, scg / nginx", vs_nginx("stream", 0, cpu_per_gib), 1.0, false, "×", 2);
  aim("RSS per idle session (issue #5)", kib_per_session, 1, false, " KiB", 2);
  if (!aim_rows.empty()) tables.push_back({{"aim", "measured", "target", "verdict", "margin"}, aim_rows});

  // Last, the one table to read: medians of every path and the ratios.
  if (!raw.cases.empty()) {
    auto summary = summary_table(raw, report);
    for (const auto& r : summary.second) {
      json line = json::object();
      for (size_t i = 0; i < r.size() && i < summary.first.size(); ++i) line[summary.first[i]] = r[i];
      report["summary"].push_back(line);
    }
    tables.push_back(summary);
  }

  if (raw.meta.value("mode", "") == "soak")
    std::printf("scg soak %s\n\n", raw.meta.value("date", "?").c_str());
  else
    std::printf("scg bench %s, %s rounds, medians (min–max); ratios paired per round\n\n",
                raw.meta.value("date", "?").c_str(), raw.meta.contains("rounds") ? raw.meta["rounds"].dump().c_str() : "?");
  for (size_t i = 0; i < tables.size(); ++i) {
    if (i + 1 == tables.size() && !raw.cases.empty()) std::printf("SUMMARY (medians; ratios of throughput and latency are a/b, of CPU a/b too)\n");
    std::printf("%s\n", text_table(tables[i].first, tables[i].second).c_str());
  }
  for (const auto& w : warnings) std::printf("WARNING: %s\n", w.c_str());

  if (!json_path.empty()) {
    std::ofstream out(json_path, std::ios::trunc);
    out << report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "scg-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (!markdown_path.empty()) {
    std::ofstream out(markdown_path, std::ios::trunc);
    out << "# scg bench " << raw.meta.value("date", "") << "\n\n";
    for (const auto& [key, value] : raw.meta.items())
      out << "- " << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    out << "\nMedians over rounds (streams: over all samples), (min–max) in brackets; ratios are paired "
           "per round or sample. Middle-box CPU is scg, nginx (master + workers) or haproxy.";
    if (raw.meta.contains("scg_before_sha256"))
      out << " `before` is BENCH_SCG_BEFORE's scg binary (scg_before_sha256), started as scg.";
    out << "\n\n";
    for (const auto& [header, rows] : tables) out << markdown_table(header, rows) << "\n";
    for (const auto& w : warnings) out << "\n**Warning:** " << w << "\n";
    if (!out) {
      std::fprintf(stderr, "scg-bench: cannot write %s\n", markdown_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace scg::bench
