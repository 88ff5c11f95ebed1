// What a session's requests mean for its journal, and the journals kept.
// Field numbers: docs/spark-wire.md ("What a replay reads").
#include "net/session_journal.hpp"

#include <algorithm>
#include <cctype>

#include "net/net_stats.hpp"

namespace scg::net {

namespace pw = core::protowire;

static_assert(unreplayable_count == std::tuple_size_v<decltype(net_stats::unreplayable_sessions)>);

namespace {

// --- reading nested fields of a request ------------------------------------------

/// Narrows `r` to the payload of the first length-delimited field `number`
/// within its limit; false when there is none or the bytes are bad.
bool enter(pw::reader& r, std::uint32_t number) {
  std::string reason;
  while (r.left() > 0) {
    pw::walked f;
    if (pw::read_field(r, f, reason, 0, nullptr) != pw::met::field) return false;
    if (f.type != 2) continue;
    if (f.value > r.left()) return false;
    if (f.number == number) {
      r.set_limit(r.pos() + f.value);
      return true;
    }
    r.skip(f.value);
  }
  return false;
}

/// The number of the first length-delimited field within `r`'s limit
/// (a oneof's member), `r` narrowed to its payload; 0 when none.
std::uint32_t member(pw::reader& r) {
  std::string reason;
  while (r.left() > 0) {
    pw::walked f;
    if (pw::read_field(r, f, reason, 0, nullptr) != pw::met::field) return 0;
    if (f.type != 2) continue;
    if (f.value > r.left()) return 0;
    r.set_limit(r.pos() + f.value);
    return f.number;
  }
  return 0;
}

/// String field `number` of the message `r` is narrowed to ("" when absent).
std::string string_field(pw::reader r, std::uint32_t number) {
  std::string out;
  if (enter(r, number)) r.copy(r.left(), out);
  return out;
}

/// Every string of repeated field `number` (Config's keys).
std::vector<std::string> strings_field(pw::reader r, std::uint32_t number) {
  std::vector<std::string> out;
  std::string reason;
  while (r.left() > 0) {
    pw::walked f;
    if (pw::read_field(r, f, reason, 0, nullptr) != pw::met::field) break;
    if (f.type != 2) continue;
    if (f.value > r.left()) break;
    if (f.number == number) {
      out.emplace_back();
      r.copy(f.value, out.back());
    } else {
      r.skip(f.value);
    }
  }
  return out;
}

/// Varint field `number` of the message `r` is narrowed to (0 when absent).
std::uint64_t varint_field(pw::reader r, std::uint32_t number) {
  std::string reason;
  while (r.left() > 0) {
    pw::walked f;
    if (pw::read_field(r, f, reason, 0, nullptr) != pw::met::field) return 0;
    if (f.type == 0 && f.number == number) return f.value;
    if (f.type == 2) {
      if (f.value > r.left()) return 0;
      r.skip(f.value);
    }
  }
  return 0;
}

/// `w` in lower case: Spark's view, function and variable names are case-insensitive.
std::string lower(std::string_view w) {
  std::string out(w);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// A SQL identifier as the journal keys it: backticks dropped, lower case.
std::string name_key(std::string_view w) {
  std::string out;
  for (char c : w)
    if (c != '`') out.push_back(c);
  return lower(out);
}

journal_verdict record(std::vector<std::string> names, bool optional = false) {
  journal_verdict v;
  v.what = journal_verdict::kind::record;
  v.names = std::move(names);
  v.optional = optional;
  return v;
}
journal_verdict forget(std::vector<std::string> names) {
  journal_verdict v;
  v.what = journal_verdict::kind::forget;
  v.names = std::move(names);
  return v;
}
journal_verdict refuse(unreplayable why) {
  journal_verdict v;
  v.what = journal_verdict::kind::unreplayable;
  v.why = why;
  return v;
}

std::vector<std::string> prefixed(const char* prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(prefix + k);
  return out;
}

// ConfigRequest.operation 3 → Operation: set 1 (pairs 1 → KeyValue key 1), unset 6 (keys 1).
journal_verdict classify_config(pw::reader r) {
  if (!enter(r, 3)) return {};
  const auto op = member(r);
  if (op == 1) {
    std::vector<std::string> keys;
    pw::reader pairs = r;
    std::string reason;
    while (pairs.left() > 0) {
      pw::walked f;
      if (pw::read_field(pairs, f, reason, 0, nullptr) != pw::met::field) return {};
      if (f.type != 2) continue;
      if (f.value > pairs.left()) return {};
      if (f.number == 1) {
        pw::reader pair = pairs;
        pair.set_limit(pairs.pos() + f.value);
        keys.push_back(string_field(pair, 1));
      }
      pairs.skip(f.value);
    }
    if (keys.empty()) return {};
    return record(prefixed("conf:", keys));
  }
  if (op == 6) {
    auto keys = strings_field(r, 1);
    if (keys.empty()) return {};
    return forget(prefixed("conf:", keys));
  }
  return {};
}

// ExecutePlanRequest.plan 3 → Plan.command 2 → Command's member (commands.proto).
journal_verdict classify_plan(pw::reader r) {
  if (!enter(r, 3) || !enter(r, 2)) return {};
  switch (member(r)) {
    case 1:   // register_function → CommonInlineUserDefinedFunction.function_name 1
    case 10:  // register_table_function → CommonInlineUserDefinedTableFunction.function_name 1
    {
      const auto name = lower(string_field(r, 1));
      return name.empty() ? journal_verdict{} : record({"func:" + name});
    }
    case 3: {  // create_dataframe_view: name 2, is_global 3
      if (varint_field(r, 3) != 0) return refuse(unreplayable::global_view);
      const auto name = lower(string_field(r, 2));
      return name.empty() ? journal_verdict{} : record({"view:" + name});
    }
    case 5: {  // sql_command: sql 1 (before 4.0), or input 6 → Relation.sql 10 → SQL.query 1
      auto text = string_field(r, 1);
      if (text.empty() && enter(r, 6)) {
        pw::reader with = r;
        if (enter(with, 41) && enter(with, 1)) r = with;  // with_relations 41 → root 1
        if (enter(r, 10)) text = string_field(r, 1);
      }
      return classify_sql(text);
    }
    case 6: return refuse(unreplayable::streaming);    // write_stream_operation_start
    case 12: {  // register_data_source → CommonInlineUserDefinedDataSource.name 1
      auto name = string_field(r, 1);
      return name.empty() ? journal_verdict{} : record({"source:" + name});
    }
    case 14: return refuse(unreplayable::checkpoint);  // checkpoint_command
    case 17: return refuse(unreplayable::ml_model);    // ml_command
    default: return {};
  }
}

// --- SQL --------------------------------------------------------------------------

/// The words of a SQL statement, comments and white space skipped.
class sql_words {
 public:
  explicit sql_words(std::string_view s) : s_(s) {}

  /// The next word (letters, digits, _ . and `quoted` parts, backticks
  /// kept) or punctuation character; "" at the end.
  std::string_view next() {
    skip_space();
    const auto start = i_;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '`') {
        const auto close = s_.find('`', i_ + 1);
        i_ = close == std::string_view::npos ? s_.size() : close + 1;
      } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') {
        ++i_;
      } else {
        break;
      }
    }
    if (i_ == start && i_ < s_.size()) ++i_;  // one punctuation character
    return s_.substr(start, i_ - start);
  }
  /// True (and past it) when the next word is `keyword`, in any case.
  bool take(std::string_view keyword) {
    const auto save = i_;
    if (upper(next()) == keyword) return true;
    i_ = save;
    return false;
  }
  /// What is left, without surrounding white space, comments or a final ';'.
  std::string_view rest() {
    skip_space();
    auto r = s_.substr(i_);
    while (!r.empty() && (std::isspace(static_cast<unsigned char>(r.back())) || r.back() == ';')) r.remove_suffix(1);
    return r;
  }

  static std::string upper(std::string_view w) {
    std::string out(w);
    for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
  }

 private:
  void skip_space() {
    while (i_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i_]))) {
        ++i_;
      } else if (s_.compare(i_, 2, "--") == 0) {
        const auto eol = s_.find('\n', i_);
        i_ = eol == std::string_view::npos ? s_.size() : eol + 1;
      } else if (s_.compare(i_, 2, "/*") == 0) {
        const auto end = s_.find("*/", i_ + 2);
        i_ = end == std::string_view::npos ? s_.size() : end + 2;
      } else {
        return;
      }
    }
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

/// A variable's name without its optional system.session. qualifier.
std::string variable_name(std::string_view w) {
  auto n = name_key(w);
  const auto dot = n.rfind('.');
  return dot == std::string::npos ? n : n.substr(dot + 1);
}

/// A conf key as SET and RESET spell it: surrounding white space and backticks dropped.
std::string conf_key(std::string_view k) {
  while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.remove_suffix(1);
  while (!k.empty() && std::isspace(static_cast<unsigned char>(k.front()))) k.remove_prefix(1);
  std::string out;
  for (char c : k)
    if (c != '`') out.push_back(c);
  return out;
}

journal_verdict classify_create(sql_words& w) {
  if (w.take("OR") && !w.take("REPLACE")) return {};
  if (w.take("GLOBAL")) {
    const bool temp = w.take("TEMPORARY") || w.take("TEMP");
    return temp && w.take("VIEW") ? refuse(unreplayable::global_view) : journal_verdict{};
  }
  if (!(w.take("TEMPORARY") || w.take("TEMP"))) return {};  // persistent: it lives in the catalog
  const bool view = w.take("VIEW");
  if (!view && !w.take("FUNCTION")) return {};
  if (w.take("IF")) {
    w.take("NOT");
    w.take("EXISTS");
  }
  const auto name = name_key(w.next());
  if (name.empty()) return {};
  return record({(view ? "view:" : "func:") + name});
}

journal_verdict classify_drop(sql_words& w) {
  const bool temp = w.take("TEMPORARY") || w.take("TEMP");
  const char* prefix = w.take("VIEW")                         ? "view:"
                       : w.take("FUNCTION")                   ? "func:"
                       : temp && (w.take("VARIABLE") || w.take("VAR")) ? "var:"
                                                              : nullptr;
  if (!prefix) return {};
  if (w.take("IF")) w.take("EXISTS");
  const auto word = w.next();
  const auto name = std::string(prefix) == "var:" ? variable_name(word) : name_key(word);
  if (name.empty()) return {};
  return forget({prefix + name});
}

}  // namespace

std::string_view unreplayable_name(unreplayable u) {
  switch (u) {
    case unreplayable::none: return "none";
    case unreplayable::checkpoint: return "checkpoint";
    case unreplayable::ml_model: return "ml_model";
    case unreplayable::streaming: return "streaming";
    case unreplayable::global_view: return "global_view";
    case unreplayable::sql_script: return "sql_script";
    case unreplayable::too_large: return "too_large";
    case unreplayable::store_full: return "store_full";
    case unreplayable::artifacts_too_large: return "artifacts_too_large";
    case unreplayable::spool_full: return "spool_full";
    case unreplayable::spool_failed: return "spool_failed";
  }
  return "none";
}

std::string_view unreplayable_text(unreplayable u) {
  switch (u) {
    case unreplayable::none: return "";
    case unreplayable::checkpoint:
      return "it made a checkpoint (localCheckpoint or checkpoint), whose data lived only on that server";
    case unreplayable::ml_model: return "it ran an ML command, whose models lived in that server's cache";
    case unreplayable::streaming: return "it started a streaming query";
    case unreplayable::global_view: return "it created a global temp view, which belongs to the server";
    case unreplayable::sql_script: return "it ran a SQL script, whose statements scg does not read";
    case unreplayable::too_large: return "its journal outgrew on_backend_lost.max_journal_kib";
    case unreplayable::store_full: return "this replica's journals reached on_backend_lost.max_journal_total_mib";
    case unreplayable::artifacts_too_large: return "its artifacts outgrew on_backend_lost.max_artifacts_mib";
    case unreplayable::spool_full: return "this replica's artifact spool reached on_backend_lost.max_spool_mib";
    case unreplayable::spool_failed: return "its artifacts could not be written to this replica's spool";
  }
  return "";
}

journal_verdict classify_sql(std::string_view sql) {
  sql_words w(sql);
  const auto first = sql_words::upper(w.next());
  if (first == "SET") {
    if (w.take("VAR") || w.take("VARIABLE")) {
      const auto name = variable_name(w.next());
      return name.empty() || name == "(" ? journal_verdict{} : record({"var:" + name});
    }
    if (w.take("TIME")) return record({"conf:spark.sql.session.timeZone"});
    const auto rest = w.rest();
    const auto eq = rest.find('=');
    if (eq == std::string_view::npos) return {};  // SET, SET -v, SET key: they only show
    const auto key = conf_key(rest.substr(0, eq));
    return key.empty() ? journal_verdict{} : record({"conf:" + key});
  }
  if (first == "RESET") {
    const auto key = conf_key(w.rest());
    return forget({key.empty() ? "conf:" : "conf:" + key});
  }
  if (first == "USE") {
    if (w.take("CATALOG")) return record({"catalog", "db"}, true);
    return record({"db"}, true);
  }
  if (first == "CREATE") return classify_create(w);
  if (first == "DECLARE") {
    if (w.take("OR") && !w.take("REPLACE")) return {};
    if (!w.take("VARIABLE")) w.take("VAR");
    const auto name = variable_name(w.next());
    return name.empty() ? journal_verdict{} : record({"var:" + name});
  }
  if (first == "ADD") {
    const auto what = sql_words::upper(w.next());
    if (what != "JAR" && what != "JARS" && what != "FILE" && what != "FILES" && what != "ARCHIVE" &&
        what != "ARCHIVES")
      return {};
    const auto rest = w.rest();
    return rest.empty() ? journal_verdict{} : record({"add:" + what + ":" + std::string(rest)});
  }
  if (first == "DROP") return classify_drop(w);
  if (first == "BEGIN") return refuse(unreplayable::sql_script);
  return {};
}

journal_verdict classify_request(rpc kind, const segments& body) {
  if (kind != rpc::config && kind != rpc::execute_plan) return {};
  pw::reader r(body.data(), body.size());
  return kind == rpc::config ? classify_config(r) : classify_plan(r);
}

std::string journal_form(const segments& body, std::uint32_t last_field) {
  pw::reader r(body.data(), body.size());
  std::string out, payload, reason;
  while (r.left() > 0) {
    pw::walked f;
    if (pw::read_field(r, f, reason, 0, nullptr) != pw::met::field) break;
    if (f.type != 2) continue;
    if (f.value > r.left()) break;
    if (f.number >= 1 && f.number <= last_field) {
      r.copy(f.value, payload);
      pw::put_bytes(out, f.number, payload);
    } else {
      r.skip(f.value);
    }
  }
  return out;
}

// --- journals ----------------------------------------------------------------------

namespace {

bool matches(const std::string& name, const std::string& dropped) {
  if (!dropped.empty() && dropped.back() == ':') return name.compare(0, dropped.size(), dropped) == 0;
  return name == dropped;
}

bool matches_any(const std::string& name, const std::vector<std::string>& dropped) {
  return std::any_of(dropped.begin(), dropped.end(), [&](const std::string& d) { return matches(name, d); });
}

}  // namespace

void session_journal::drop_names(const std::vector<std::string>& names) {
  for (auto& e : entries_)
    e.names.erase(std::remove_if(e.names.begin(), e.names.end(),
                                 [&](const std::string& n) { return matches_any(n, names); }),
                  e.names.end());
  for (const auto& e : entries_)
    if (e.names.empty()) bytes_ -= e.request.size();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [](const journal_entry& e) { return e.names.empty(); }),
                 entries_.end());
}

void session_journal::apply(const journal_verdict& v, rpc kind, std::string request,
                            std::shared_ptr<const spooled_call> spooled) {
  if (why_ != unreplayable::none) return;
  switch (v.what) {
    case journal_verdict::kind::none: return;
    case journal_verdict::kind::unreplayable: return refuse(v.why);
    case journal_verdict::kind::record: drop_names(v.names); break;
    case journal_verdict::kind::forget: {
      // An entry that defined more than what is undone stays, for the rest;
      // the undoing request then follows it.
      const bool partly = std::any_of(entries_.begin(), entries_.end(), [&](const journal_entry& e) {
        bool hit = false, kept = false;
        for (const auto& n : e.names) (matches_any(n, v.names) ? hit : kept) = true;
        return hit && kept;
      });
      drop_names(v.names);
      if (!partly) return;
      break;
    }
  }
  bytes_ += request.size();
  entries_.push_back({kind, v.names, std::move(request), v.optional, std::move(spooled)});
}

void session_journal::refuse(unreplayable why) {
  if (why_ == unreplayable::none) why_ = why;
  entries_.clear();
  entries_.shrink_to_fit();
  bytes_ = 0;
}

void journal_store::record(const std::string& key, const journal_verdict& v, rpc kind, std::string request,
                           std::shared_ptr<const spooled_call> spooled) {
  if (v.what == journal_verdict::kind::none) return;
  std::lock_guard lock{mu_};
  if (v.what == journal_verdict::kind::forget && !sessions_.count(key)) return;
  auto& j = sessions_[key].journal;
  const auto before = j.bytes();
  const auto was = j.why_not();
  j.apply(v, kind, std::move(request), std::move(spooled));
  bytes_ = bytes_ - before + j.bytes();
  if (j.bytes() > limits_.max_session_bytes || bytes_ > limits_.max_total_bytes) {
    bytes_ -= j.bytes();
    j.refuse(j.bytes() > limits_.max_session_bytes ? unreplayable::too_large : unreplayable::store_full);
  }
  if (was == unreplayable::none && j.why_not() != unreplayable::none)
    global_net_stats().unreplayable_sessions[static_cast<std::size_t>(j.why_not())].fetch_add(1);
  publish();
}

void journal_store::defer(const std::string& op, const std::string& key, journal_verdict v, rpc kind,
                          std::string request) {
  if (op.empty() || v.what == journal_verdict::kind::none) return;
  std::lock_guard lock{mu_};
  if (!deferred_.try_emplace(op, deferred{key, std::move(v), kind, std::move(request)}).second) return;
  deferred_order_.push_back(op);
  while (deferred_.size() > max_deferred && !deferred_order_.empty()) {
    deferred_.erase(deferred_order_.front());
    deferred_order_.pop_front();
  }
  if (deferred_order_.size() > 2 * max_deferred) {  // ids completed since: drop them from the order
    std::deque<std::string> live;
    for (auto& id : deferred_order_)
      if (deferred_.count(id)) live.push_back(std::move(id));
    deferred_order_.swap(live);
  }
}

void journal_store::complete(const std::string& op, const std::string& key) {
  deferred d;
  {
    std::lock_guard lock{mu_};
    auto it = deferred_.find(op);
    if (it == deferred_.end() || it->second.key != key) return;
    d = std::move(it->second);
    deferred_.erase(it);
  }
  record(key, d.verdict, d.kind, std::move(d.request));
}

void journal_store::forget(const std::string& key) {
  std::lock_guard lock{mu_};
  for (auto it = deferred_.begin(); it != deferred_.end();) it = it->second.key == key ? deferred_.erase(it) : std::next(it);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  const auto& j = it->second.journal;
  bytes_ -= j.bytes();
  if (j.why_not() != unreplayable::none)
    global_net_stats().unreplayable_sessions[static_cast<std::size_t>(j.why_not())].fetch_sub(1);
  if (it->second.ids) translated_.fetch_sub(1, std::memory_order_relaxed);
  sessions_.erase(it);
  publish();
}

std::size_t journal_store::sweep(const std::function<bool(const std::string& key)>& bound) {
  std::vector<std::string> keys;
  {
    std::lock_guard lock{mu_};
    keys.reserve(sessions_.size());
    for (const auto& [key, s] : sessions_) keys.push_back(key);
  }
  std::size_t gone = 0;
  for (const auto& key : keys) {
    if (bound(key)) continue;
    {
      std::lock_guard lock{mu_};
      if (replaying_.count(key) || !sessions_.count(key)) continue;
    }
    forget(key);
    ++gone;
  }
  global_net_stats().journals_swept_total.fetch_add(gone, std::memory_order_relaxed);
  return gone;
}

void journal_store::publish() const {
  auto& m = global_net_stats();
  m.journal_bytes.store(bytes_, std::memory_order_relaxed);
  m.journal_sessions.store(sessions_.size(), std::memory_order_relaxed);
}

journal_snapshot journal_store::snapshot(const std::string& key) const {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return {};
  return {it->second.journal.entries(), it->second.journal.why_not(), it->second.ids};
}

void journal_store::set_ids(const std::string& key, session_ids ids) {
  std::lock_guard lock{mu_};
  auto& s = sessions_[key];
  if (!s.ids) translated_.fetch_add(1, std::memory_order_relaxed);
  s.ids = std::move(ids);
}

std::optional<session_ids> journal_store::ids(const std::string& key) const {
  if (translated_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.ids;
}

bool journal_store::begin_replay(const std::string& key, std::function<void()> waiter) {
  std::lock_guard lock{mu_};
  auto [it, fresh] = replaying_.try_emplace(key);
  if (!fresh) it->second.push_back(std::move(waiter));
  return fresh;
}

void journal_store::end_replay(const std::string& key) {
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock{mu_};
    auto it = replaying_.find(key);
    if (it == replaying_.end()) return;
    waiters = std::move(it->second);
    replaying_.erase(it);
  }
  for (auto& w : waiters) w();
}

unreplayable journal_store::why_not(const std::string& key) const {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  return it == sessions_.end() ? unreplayable::none : it->second.journal.why_not();
}

std::size_t journal_store::bytes() const {
  std::lock_guard lock{mu_};
  return bytes_;
}

std::size_t journal_store::sessions() const {
  std::lock_guard lock{mu_};
  return sessions_.size();
}

std::vector<std::size_t> journal_store::unreplayable_sessions() const {
  std::vector<std::size_t> out(unreplayable_count, 0);
  std::lock_guard lock{mu_};
  for (const auto& [key, s] : sessions_) ++out[static_cast<std::size_t>(s.journal.why_not())];
  return out;
}

}  // namespace scg::net
