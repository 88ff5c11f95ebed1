#include "tools/fake_spark/ui_api.hpp"

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace scg::fake {
namespace {

using nlohmann::json;

/// The cluster load the fake reports; tests set it with POST /fake/load.
struct cluster_load {
  int64_t slots = 4;      // task slots of the one executor
  int64_t active = 0;     // running tasks
  int64_t pending = 0;    // tasks waiting for a slot
  int64_t completed = 0;  // finished tasks of the active stage
};

json to_json(const cluster_load& load) {
  return {{"slots", load.slots},
          {"active", load.active},
          {"pending", load.pending},
          {"completed", load.completed}};
}

/// Applies the fields present in `body`; nullopt when one is not a non-negative integer.
std::optional<cluster_load> merged(cluster_load load, const json& body) {
  if (!body.is_object()) return std::nullopt;
  const std::pair<const char*, int64_t*> fields[] = {{"slots", &load.slots},
                                                     {"active", &load.active},
                                                     {"pending", &load.pending},
                                                     {"completed", &load.completed}};
  for (auto [key, field] : fields) {
    auto it = body.find(key);
    if (it == body.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) return std::nullopt;
    *field = it->get<int64_t>();
  }
  return load;
}

/// The driver (which runs no tasks) and one executor holding every slot, as in
/// GET /api/v1/applications/{id}/executors.
json executors(const cluster_load& load) {
  return json::array({
      {{"id", "driver"},
       {"isActive", true},
       {"totalCores", 0},
       {"maxTasks", 0},
       {"activeTasks", 0}},
      {{"id", "1"},
       {"isActive", true},
       {"totalCores", load.slots},
       {"maxTasks", load.slots},
       {"activeTasks", load.active}},
  });
}

/// One active stage whose numTasks - numActiveTasks - numCompletedIndices is the pending count.
json active_stages(const cluster_load& load) {
  if (load.active == 0 && load.pending == 0) return json::array();
  return json::array({{{"stageId", 1},
                       {"attemptId", 0},
                       {"status", "ACTIVE"},
                       {"name", "fake stage"},
                       {"numTasks", load.active + load.pending + load.completed},
                       {"numActiveTasks", load.active},
                       {"numCompleteTasks", load.completed},
                       {"numCompletedIndices", load.completed}}});
}

void send_json(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

struct ui_api::impl {
  impl(std::string backend, std::function<json()> stats_fn)
      : name(std::move(backend)), app_id("app-" + name), stats(std::move(stats_fn)) {}

  /// Spark answers 404 with a plain-text message for an unknown application.
  bool known_app(const httplib::Request& req, httplib::Response& res) const {
    if (req.matches[1] == app_id) return true;
    res.status = 404;
    res.set_content("no such app: " + std::string(req.matches[1]), "text/plain");
    return false;
  }

  cluster_load current_load() {
    std::lock_guard lock(mu);
    return load;
  }

  void add_routes() {
    http.Get("/api/v1/applications", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, json::array({{{"id", app_id}, {"name", "Spark Connect " + name}}}));
    });
    http.Get(R"(/api/v1/applications/([^/]+)/executors)",
             [this](const httplib::Request& req, httplib::Response& res) {
               if (known_app(req, res)) send_json(res, executors(current_load()));
             });
    http.Get(R"(/api/v1/applications/([^/]+)/stages)",
             [this](const httplib::Request& req, httplib::Response& res) {
               if (!known_app(req, res)) return;
               // Only the active stage exists; any other status filter finds nothing.
               const auto status = req.get_param_value("status");
               const bool wants_active = status.empty() || status == "active" || status == "ACTIVE";
               send_json(res, wants_active ? active_stages(current_load()) : json::array());
             });
    http.Get("/fake/load", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, to_json(current_load()));
    });
    http.Post("/fake/load", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body, nullptr, false);
      std::lock_guard lock(mu);
      auto next = merged(load, body);
      if (!next) {
        send_json(
            res,
            {{"error",
              "expected an object of non-negative integers: slots, active, pending, completed"}},
            400);
        return;
      }
      load = *next;
      send_json(res, to_json(load));
    });
    http.Get("/fake/stats",
             [this](const httplib::Request&, httplib::Response& res) { send_json(res, stats()); });
  }

  const std::string name;
  const std::string app_id;
  const std::function<json()> stats;
  std::mutex mu;
  cluster_load load;
  httplib::Server http;
  std::thread thread;
};

ui_api::ui_api(std::string name, std::function<json()> stats)
    : impl_(std::make_unique<impl>(std::move(name), std::move(stats))) {}

ui_api::~ui_api() { stop(); }

int ui_api::start(const std::string& host, int port) {
  impl_->add_routes();
  const int bound = port == 0 ? impl_->http.bind_to_any_port(host)
                              : (impl_->http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return 0;
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  // stop() is a no-op on a server that is not running yet: wait, so it cannot be missed.
  while (!impl_->http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void ui_api::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->http.stop();
  impl_->thread.join();
}

}  // namespace scg::fake
