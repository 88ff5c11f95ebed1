#include "net/call_replay.hpp"

#include <spdlog/spdlog.h>

#include "core/audit.hpp"
#include "core/clock.hpp"
#include "core/usage.hpp"
#include "net/net_stats.hpp"
#include "net/replayer.hpp"

namespace scg::net {

void call_journal::first_message(const forward_context& fx, const call_facts& facts, message_reader& body) {
  if (!fx.journal || fx.lost_action_for(facts.identity.tenant) != config::lost_action::replay) return;
  if (facts.kind == rpc::add_artifacts) {
    if (facts.fields.session_id.empty() || fx.journal->why_not(facts.key) != unreplayable::none) return;
    if (!fx.journal->spool()) {
      verdict_.what = journal_verdict::kind::unreplayable;
      verdict_.why = unreplayable::spool_failed;
      return;
    }
    writer_ = fx.journal->spool()->start(facts.key);
    return spool(body);
  }
  if (!body.readable()) return;
  verdict_ = classify_request(facts.kind, body.view());
  if (verdict_.what == journal_verdict::kind::record || verdict_.what == journal_verdict::kind::forget)
    request_ = journal_form(body.view());
}

void call_journal::spool(message_reader& body) {
  if (!body.readable()) return writer_->fail(unreplayable::spool_failed);  // not inflatable: its server will say
  const auto form = artifact_form(body.view());
  for (auto& name : artifact_names(form)) artifacts_.push_back("artifact:" + name);
  writer_->append(form);
}

void call_journal::on_success(const forward_context& fx, const call_facts& facts) {
  if (!fx.journal || facts.fields.session_id.empty()) return;
  if (facts.kind == rpc::release_session) return fx.journal->forget(facts.key);
  if (facts.kind == rpc::add_artifacts) {
    if (!writer_) return fx.journal->record(facts.key, verdict_, facts.kind, {});
    journal_verdict v;
    auto spooled = writer_->commit();
    if (!spooled) {
      v.what = journal_verdict::kind::unreplayable;
      v.why = writer_->failed();
    } else if (!artifacts_.empty()) {
      v.what = journal_verdict::kind::record;
      v.names = std::move(artifacts_);
    }
    writer_.reset();
    return fx.journal->record(facts.key, v, facts.kind, {}, std::move(spooled));
  }
  if (facts.kind == rpc::reattach_execute) return fx.journal->complete(facts.fields.operation_id, facts.key);
  fx.journal->record(facts.key, verdict_, facts.kind, std::move(request_));
}

void call_journal::on_failure(const forward_context& fx, const call_facts& facts) {
  if (!fx.journal || facts.kind != rpc::execute_plan || facts.fields.session_id.empty()) return;
  fx.journal->defer(facts.fields.operation_id, facts.key, std::move(verdict_), facts.kind, std::move(request_));
}

void call_journal::translate_first(const forward_context& fx, const call_facts& facts, held_message* first) {
  if (!fx.journal || facts.fields.session_id.empty()) return;
  ids_ = fx.journal->ids(facts.key);
  if (!ids_ || ids_->client.empty()) {
    ids_.reset();
    return;
  }
  if (first && facts.fields.observed_server_session == ids_->client) request(facts.kind, *first);
}

void call_journal::request(rpc kind, held_message& msg) const {
  if (msg.header.compressed) return;  // left as it is: its server then answers SESSION_CHANGED
  overwrite_id(msg.body(), observed_field(kind), ids_->client, ids_->server);
}

void call_journal::response(rpc kind, held_message& msg) const {
  if (msg.header.compressed) return;
  overwrite_id(msg.body(), server_side_field(kind), ids_->server, ids_->client);
}

namespace {

std::string session_text(const call_facts& facts) {
  return "session " + facts.fields.session_id.substr(0, 64);
}

}  // namespace

void replay_session(forward_context& fx, const call_facts& facts, actors::backend_index lost, actors::backend_index to,
                    std::function<void(std::optional<refusal>)> done) {
  // The callbacks hold the store: gRPC may complete a replay during shutdown.
  const std::shared_ptr<journal_store> store = fx.journal;
  const auto& from = *fx.backends[lost];
  auto& next = *fx.backends[to];
  const std::string key = facts.key;
  const std::string moved = session_text(facts) + " moved from backend " + from.name + " (lost) to " + next.name;
  // Another call of the session is replaying it: this one goes on after it.
  const bool mine = store->begin_replay(key, [store, key, to, moved, done] {
    auto ids = store->ids(key);
    if (ids && ids->backend == to) return done(std::nullopt);
    done(refusal{core::local_reason::replay_failed,
                 "scg: " + moved + ", and its replay there failed; it goes on there as a new session"});
  });
  if (!mine) return;
  const auto snap = store->snapshot(key);
  if (snap.ids && snap.ids->backend == to) {  // replayed there by a call that raced this one
    store->end_replay(key);
    return done(std::nullopt);
  }
  if (snap.why != unreplayable::none) {
    store->forget(key);
    store->end_replay(key);
    return done(refusal{core::local_reason::session_unreplayable,
                        "scg: " + moved + ", and scg cannot restore its state there: " +
                            std::string(unreplayable_text(snap.why)) +
                            ". It goes on there as a new session (on_backend_lost.action: replay)"});
  }
  // The id the client first observed: kept from an earlier replay, unless
  // that one ran before the client had observed any (its first call).
  const std::string client =
      snap.ids && !snap.ids->client.empty() ? snap.ids->client : facts.fields.observed_server_session;
  replay_request req;
  req.session_id = facts.fields.session_id;
  req.user_id = facts.spark_user;
  req.entries = snap.entries;
  req.token = fx.backend_tokens.for_tenant(facts.identity.tenant);
  const auto started = std::chrono::steady_clock::now();
  const std::string tenant = facts.identity.tenant, user = facts.fields.user_id, session = facts.fields.session_id;
  const std::string lost_name = from.name, to_name = next.name;
  core::usage_ledger* usage = fx.usage;
  replay_journal(next, std::move(req), [store, key, to, client, moved, done, started, tenant, user, session,
                                        lost_name, to_name, usage](replay_outcome out) {
    auto& m = global_net_stats();
    const auto took = std::chrono::steady_clock::now() - started;
    const auto entries = std::to_string(out.replayed);
    // What the new server refused of the optional entries (a database it lacks): the report says so.
    std::string skipped;
    for (const auto& s : out.skipped) skipped += (skipped.empty() ? "" : "; ") + s;
    core::audit("session.replay", {{"tenant", tenant}, {"user", user}, {"session", session}, {"from", lost_name},
                                   {"to", to_name}, {"entries", entries}, {"result", out.ok ? "ok" : "failed"},
                                   {"failed", out.failed}, {"skipped", skipped}});
    if (!out.ok) {
      store->forget(key);
      store->end_replay(key);
      return done(refusal{core::local_reason::replay_failed,
                          "scg: " + moved + ", and replaying its journal there failed at " + out.failed +
                              "; it goes on there as a new session (on_backend_lost.action: replay)"});
    }
    m.replays_total.fetch_add(1, std::memory_order_relaxed);
    m.replay_entries_total.fetch_add(out.replayed, std::memory_order_relaxed);
    m.replay_skipped_entries_total.fetch_add(out.skipped.size(), std::memory_order_relaxed);
    m.replay_durations.observe(
        net_stats::duration_bounds_us,
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
    if (usage)
      usage->record_replay(tenant, user,
                           static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
                           core::wall_now_ms());
    for (const auto& s : out.skipped) spdlog::warn("replay_skipped session={} entry={}", session, s);
    store->set_ids(key, {client, out.server_id, static_cast<std::uint32_t>(to)});
    store->end_replay(key);
    done(std::nullopt);
  });
}

}  // namespace scg::net
