#include "discovery/k8s_discovery.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/address.hpp"
#include "core/file.hpp"

namespace scg::discovery {
namespace {

using nlohmann::json;

/// Largest LIST answer scg reads; a Service's slices are a few KiB each.
constexpr std::size_t max_list_bytes = 64u << 20;
/// Largest single watch event line (one EndpointSlice holds at most 1000 endpoints).
constexpr std::size_t max_event_bytes = 16u << 20;
/// Largest error body kept for the log.
constexpr std::size_t max_error_bytes = 64u << 10;
constexpr int connect_timeout_secs = 3;
constexpr int list_timeout_secs = 30;
constexpr int backoff_first_ms = 100;
constexpr int backoff_max_ms = 5000;

spdlog::logger& main_log() {
  auto log = spdlog::get("main");
  return log ? *log : *spdlog::default_logger_raw();
}

using core::with_host;

/// Percent-encodes everything but RFC 3986 unreserved characters.
std::string encode(const std::string& s) {
  return core::percent_encode(s, [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
  });
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string string_at(const json& j, const char* a, const char* b) {
  const json* x = member(j, a);
  const json* y = x ? member(*x, b) : nullptr;
  return y && y->is_string() ? y->get<std::string>() : std::string();
}

/// The endpoint serves new sessions: ready true or unknown, not terminating.
bool endpoint_ready(const json& endpoint) {
  const json* cond = member(endpoint, "conditions");
  if (!cond || !cond->is_object()) return true;
  const json* ready = member(*cond, "ready");
  if (ready && ready->is_boolean() && !ready->get<bool>()) return false;
  const json* terminating = member(*cond, "terminating");
  return !(terminating && terminating->is_boolean() && terminating->get<bool>());
}

std::string read_token(const std::string& path) {
  std::string why;
  std::string t = core::read_file(path, why, 1u << 20).value_or("");
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  return t;
}

/// "message" of a Kubernetes Status body, or the start of the body.
std::string status_message(const std::string& body) {
  auto doc = json::parse(body, nullptr, false);
  if (const json* m = member(doc, "message"); m && m->is_string()) return m->get<std::string>();
  return body.substr(0, 200);
}

/// Dead API servers show up within about a minute even on a quiet watch.
void keepalive(socket_t sock) {
  int on = 1, idle = 30, interval = 10, count = 3;
  setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/// A failed request in words for the log (httplib's names are terse).
std::string describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "cannot connect";
    case httplib::Error::Read: return "the connection closed or a read timed out";
    case httplib::Error::Write: return "a write failed";
    case httplib::Error::Canceled: return "the answer was too large";
    case httplib::Error::SSLConnection: return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts: return "the CA file could not be loaded";
    case httplib::Error::SSLServerVerification: return "the server certificate did not verify against the CA file";
    default: return httplib::to_string(e);
  }
}

}  // namespace

std::string api_server_url(const k8s_discovery_config& cfg) {
  if (!cfg.api_server.empty()) return cfg.api_server;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host) return {};
  return "https://" + core::bracketed(host) + ":" + (port && *port ? port : "443");
}

std::vector<actors::backend_spec> ready_backends(const json& slices, const k8s_discovery_config& cfg) {
  std::vector<const json*> list;
  if (slices.is_array()) {
    for (const auto& s : slices) list.push_back(&s);
  } else if (const json* items = member(slices, "items"); items && items->is_array()) {
    for (const auto& s : *items) list.push_back(&s);
  } else if (slices.is_object()) {
    for (const auto& [name, s] : slices.items()) list.push_back(&s);
  }
  std::set<std::string> ips;
  for (const json* slice : list) {
    const json* endpoints = member(*slice, "endpoints");
    if (!endpoints || !endpoints->is_array()) continue;  // a slice with no endpoints has null here
    for (const auto& e : *endpoints) {
      const json* addresses = member(e, "addresses");
      if (!addresses || !addresses->is_array() || addresses->empty() || !(*addresses)[0].is_string()) continue;
      const auto& ip = (*addresses)[0].get_ref<const std::string&>();
      if (!ip.empty() && endpoint_ready(e)) ips.insert(ip);
    }
  }
  std::vector<actors::backend_spec> out;
  for (const auto& ip : ips) {
    const std::string address = core::bracketed(ip) + ":" + std::to_string(cfg.port);
    out.push_back({cfg.service_name + "@" + address, address, with_host(cfg.ui_url, core::bracketed(ip))});
  }
  return out;
}

bool endpoint_slice_state::reset(const json& list) {
  const json* items = member(list, "items");
  // An empty list may come back as "items": null.
  if (!items || !(items->is_array() || items->is_null())) return false;
  json next = json::object();
  if (items->is_array())
    for (const auto& s : *items) {
      std::string name = string_at(s, "metadata", "name");
      if (!name.empty()) next[name] = s;
    }
  slices_ = std::move(next);
  resource_version_ = string_at(list, "metadata", "resourceVersion");
  return true;
}

event_effect endpoint_slice_state::apply(const json& event) {
  const json* type = member(event, "type");
  const json* object = member(event, "object");
  if (!type || !type->is_string() || !object || !object->is_object()) return event_effect::ignored;
  const auto& t = type->get_ref<const std::string&>();
  if (t == "ERROR") {
    const json* code = member(*object, "code");
    return code && code->is_number_integer() && code->get<int>() == 410 ? event_effect::expired
                                                                         : event_effect::error;
  }
  std::string version = string_at(*object, "metadata", "resourceVersion");
  if (t == "BOOKMARK") {
    if (version.empty()) return event_effect::ignored;
    resource_version_ = std::move(version);
    return event_effect::bookmark;
  }
  std::string name = string_at(*object, "metadata", "name");
  if (name.empty()) return event_effect::ignored;
  if (t == "ADDED" || t == "MODIFIED")
    slices_[name] = *object;
  else if (t == "DELETED")
    slices_.erase(name);
  else
    return event_effect::ignored;
  if (!version.empty()) resource_version_ = std::move(version);
  return event_effect::applied;
}

k8s_watcher::k8s_watcher(k8s_discovery_config cfg, callback on_change)
    : cfg_(std::move(cfg)), on_change_(std::move(on_change)) {
  const std::string url = api_server_url(cfg_);
  if (const auto u = core::parse_url(url)) {
    origin_ = u->origin();
    base_path_ = u->path;
    while (!base_path_.empty() && base_path_.back() == '/') base_path_.pop_back();
  }
  if (origin_.empty()) {
    main_log().error("discovery_error reason=\"no API server: set backend_discovery.api_server or run in a pod "
                     "(KUBERNETES_SERVICE_HOST)\" api_server=\"{}\"",
                     url);
    done_ = true;
    return;
  }
  main_log().info("discovery_started api_server={} namespace={} service={} port={}", url, cfg_.namespace_,
                  cfg_.service_name, cfg_.port);
  thread_ = std::thread([this] {
    run();
    done_ = true;
  });
}

k8s_watcher::~k8s_watcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // A request may be between registration and its first byte, where stop()
  // has nothing to shut down yet: keep interrupting until the thread is out.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(connect_timeout_secs + 2);
  while (!done_ && std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (active_) active_->stop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (thread_.joinable()) thread_.join();
  if (!origin_.empty()) main_log().info("discovery_stopped service={}", cfg_.service_name);
}

k8s_watcher::counters k8s_watcher::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

bool k8s_watcher::stopping() const { return stopping_; }

bool k8s_watcher::pause(int ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !wake_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_.load(); });
}

std::unique_ptr<httplib::Client> k8s_watcher::client(int read_timeout_secs) {
  auto c = std::make_unique<httplib::Client>(origin_);
  c->set_connection_timeout(connect_timeout_secs, 0);
  c->set_read_timeout(read_timeout_secs, 0);
  c->set_write_timeout(connect_timeout_secs, 0);
  c->set_follow_location(false);
  c->set_url_encode(false);  // the paths are encoded already
  c->set_socket_options(keepalive);
  c->set_ca_cert_path(cfg_.ca_file);  // https only
  c->enable_server_certificate_verification(true);
  // Projected service account tokens rotate: read the file on every connect.
  if (auto token = read_token(cfg_.token_file); !token.empty()) c->set_bearer_token_auth(token);
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return nullptr;
  active_ = c.get();
  return c;
}

void k8s_watcher::release(std::unique_ptr<httplib::Client>& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = nullptr;
  c.reset();
}

void k8s_watcher::failed(const std::string& event, const std::string& fields) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.errors;
  }
  // The first failure of a streak is news; the retries that follow are not.
  auto level = failures_in_a_row_++ == 0 ? spdlog::level::warn : spdlog::level::debug;
  main_log().log(level, "{} service={} {} attempt={}", event, cfg_.service_name, fields, failures_in_a_row_);
}

void k8s_watcher::recovered() {
  if (failures_in_a_row_ > 0)
    main_log().info("discovery_recovered service={} after_failures={}", cfg_.service_name, failures_in_a_row_);
  failures_in_a_row_ = 0;
}

void k8s_watcher::deliver() {
  auto now = state_.ready(cfg_);
  if (delivered_ && *delivered_ == now) return;
  delivered_ = now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.updates;
  }
  main_log().debug("discovery_changed service={} backends={} resource_version={}", cfg_.service_name, now.size(),
                   state_.resource_version());
  on_change_(std::move(now));
}

std::string k8s_watcher::list_path() const {
  return base_path_ + "/apis/discovery.k8s.io/v1/namespaces/" + encode(cfg_.namespace_) +
         "/endpointslices?labelSelector=" + encode("kubernetes.io/service-name=" + cfg_.service_name);
}

void k8s_watcher::run() {
  int backoff = backoff_first_ms;
  bool need_list = true;
  while (!stopping()) {
    if (need_list) {
      if (list()) {
        need_list = false;
      } else {
        if (!pause(backoff)) return;
        backoff = std::min(backoff * 2, backoff_max_ms);
        continue;
      }
    }
    bool progressed = false;
    auto end = watch(progressed);
    if (end == watch_end::stopped) return;
    if (end == watch_end::expired) need_list = true;
    if (progressed) backoff = backoff_first_ms;
    if (!pause(backoff)) return;
    backoff = std::min(backoff * 2, backoff_max_ms);
  }
}

bool k8s_watcher::list() {
  auto cli = client(list_timeout_secs);
  if (!cli) return false;
  int status = 0;
  std::string body;
  auto res = cli->Get(
      list_path(), {{"Accept", "application/json"}},
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, std::size_t len) {
        body.append(data, len);
        return body.size() <= max_list_bytes && !stopping();
      });
  const auto error = res.error();
  release(cli);
  if (stopping()) return false;
  if (error != httplib::Error::Success) {
    failed("discovery_error", "during=list reason=\"" + describe(error) + "\"");
    return false;
  }
  if (status != 200) {
    failed("discovery_error",
           "during=list status=" + std::to_string(status) + " reason=\"" + status_message(body) + "\"");
    return false;
  }
  if (!state_.reset(json::parse(body, nullptr, false))) {
    failed("discovery_error", "during=list reason=\"the answer is not an EndpointSliceList\"");
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.lists;
  }
  recovered();
  main_log().info("discovery_list service={} slices={} backends={} resource_version={}", cfg_.service_name,
                  state_.slices().size(), state_.ready(cfg_).size(), state_.resource_version());
  deliver();
  return true;
}

k8s_watcher::watch_end k8s_watcher::watch(bool& progressed) {
  const std::string path = list_path() + "&watch=true&resourceVersion=" + encode(state_.resource_version()) +
                           "&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(cfg_.resync_secs);
  // The server ends the watch after resync_secs; a little longer without a byte is a dead watch.
  auto cli = client(cfg_.resync_secs + 30);
  if (!cli) return watch_end::stopped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.watches;
  }
  int status = 0;
  std::string error_body, pending, stop_reason;
  bool expired = false;
  auto res = cli->Get(
      path, {{"Accept", "application/json"}},
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, std::size_t len) {
        if (stopping()) return false;
        if (status != 200) {
          error_body.append(data, std::min(len, max_error_bytes - std::min(max_error_bytes, error_body.size())));
          return true;
        }
        pending.append(data, len);
        std::size_t start = 0;
        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
          const auto first = pending.begin() + static_cast<std::ptrdiff_t>(start);
          const auto last = pending.begin() + static_cast<std::ptrdiff_t>(nl);
          start = nl + 1;
          if (std::all_of(first, last, [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
            continue;
          auto event = json::parse(first, last, nullptr, false);
          switch (state_.apply(event)) {
            case event_effect::applied:
            case event_effect::bookmark: {
              std::lock_guard<std::mutex> lock(mutex_);
              ++counters_.events;
            }
              if (!progressed) recovered();
              progressed = true;
              deliver();
              break;
            case event_effect::expired:
              expired = true;
              return false;
            case event_effect::error:
              stop_reason = "error event: " + event["object"].value("message", std::string("no message"));
              return false;
            case event_effect::ignored:
              main_log().debug("watch_event_ignored service={}", cfg_.service_name);
              break;
          }
        }
        pending.erase(0, start);
        if (pending.size() > max_event_bytes) {
          stop_reason = "an event larger than " + std::to_string(max_event_bytes) + " bytes";
          return false;
        }
        return true;
      });
  const auto error = res.error();
  release(cli);
  if (stopping()) return watch_end::stopped;
  if (expired || status == 410) {
    main_log().info("watch_expired service={} resource_version={} action=relist", cfg_.service_name,
                    state_.resource_version());
    return watch_end::expired;
  }
  const std::string rv = " resource_version=" + state_.resource_version();
  if (status != 200 && status != 0) {
    failed("discovery_error", "during=watch status=" + std::to_string(status) + " reason=\"" +
                                  status_message(error_body) + "\"" + rv);
  } else if (!stop_reason.empty()) {
    failed("watch_dropped", "reason=\"" + stop_reason + "\"" + rv);
  } else if (error != httplib::Error::Success) {
    failed("watch_dropped", "reason=\"" + describe(error) + "\"" + rv);
  } else {
    // The API server closed the watch at timeoutSeconds: the ordinary end of one.
    main_log().debug("watch_ended service={}{}", cfg_.service_name, rv);
  }
  return watch_end::dropped;
}

}  // namespace scg::discovery
