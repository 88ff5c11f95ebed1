#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/load.hpp"

using namespace scg::actors;

namespace {

// As Spark 3.5 answers /executors for `local[8]`: the driver is the only
// entry and holds the slots.
const char* local_executors = R"([ {
  "id" : "driver",
  "hostPort" : "10.0.0.5:41235",
  "isActive" : true,
  "rddBlocks" : 0,
  "memoryUsed" : 0,
  "diskUsed" : 0,
  "totalCores" : 8,
  "maxTasks" : 8,
  "activeTasks" : 3,
  "failedTasks" : 0,
  "completedTasks" : 12,
  "totalTasks" : 15,
  "totalDuration" : 5230,
  "totalGCTime" : 41,
  "totalInputBytes" : 0,
  "totalShuffleRead" : 0,
  "totalShuffleWrite" : 0,
  "isBlacklisted" : false,
  "maxMemory" : 455501414,
  "addTime" : "2024-05-02T09:14:03.117GMT",
  "executorLogs" : { },
  "memoryMetrics" : { "usedOnHeapStorageMemory" : 0, "usedOffHeapStorageMemory" : 0,
                      "totalOnHeapStorageMemory" : 455501414, "totalOffHeapStorageMemory" : 0 },
  "blacklistedInStages" : [ ],
  "attributes" : { },
  "resources" : { },
  "resourceProfileId" : 0,
  "isExcluded" : false,
  "excludedInStages" : [ ]
} ])";

// A standalone cluster: the driver (no cores), two live executors and one
// that was lost but still reports its last counts.
const char* cluster_executors = R"([ {
  "id" : "driver", "hostPort" : "spark-connect-0:7078", "isActive" : true,
  "totalCores" : 0, "maxTasks" : 0, "activeTasks" : 0, "completedTasks" : 0,
  "maxMemory" : 455501414, "executorLogs" : { }, "resourceProfileId" : 0
}, {
  "id" : "1", "hostPort" : "10.0.1.11:40001", "isActive" : true,
  "totalCores" : 4, "maxTasks" : 4, "activeTasks" : 4, "completedTasks" : 310,
  "maxMemory" : 2147483648, "executorLogs" : { "stdout" : "http://10.0.1.11:8081/stdout" },
  "resourceProfileId" : 0
}, {
  "id" : "2", "hostPort" : "10.0.1.12:40001", "isActive" : false,
  "totalCores" : 4, "maxTasks" : 4, "activeTasks" : 2, "completedTasks" : 97,
  "removeTime" : "2024-05-02T09:20:11.002GMT", "removeReason" : "Container lost",
  "resourceProfileId" : 0
}, {
  "id" : "3", "hostPort" : "10.0.1.13:40001", "isActive" : true,
  "totalCores" : 4, "maxTasks" : 4, "activeTasks" : 1, "completedTasks" : 288,
  "resourceProfileId" : 0
} ])";

// /stages?status=active: a shuffle stage part done (with three retried
// tasks, so numCompleteTasks exceeds numCompletedIndices) and one not started.
const char* cluster_stages = R"([ {
  "status" : "ACTIVE", "stageId" : 4, "attemptId" : 0,
  "numTasks" : 200, "numActiveTasks" : 5, "numCompleteTasks" : 53,
  "numFailedTasks" : 3, "numKilledTasks" : 0, "numCompletedIndices" : 50,
  "submissionTime" : "2024-05-02T09:21:40.511GMT",
  "name" : "collect at <unknown>:0", "schedulingPool" : "default",
  "rddIds" : [ 12, 11 ], "accumulatorUpdates" : [ ], "killedTasksSummary" : { },
  "resourceProfileId" : 0
}, {
  "status" : "ACTIVE", "stageId" : 5, "attemptId" : 0,
  "numTasks" : 10, "numActiveTasks" : 0, "numCompleteTasks" : 0,
  "numFailedTasks" : 0, "numKilledTasks" : 0, "numCompletedIndices" : 0,
  "name" : "count at <unknown>:0", "schedulingPool" : "default"
} ])";

spark_load parsed(std::string_view executors, std::string_view stages) {
  load_result r = parse_spark_load(executors, stages);
  INFO(r.error);
  REQUIRE(r.load);
  CHECK(r.error.empty());
  return *r.load;
}

std::string error_of(std::string_view executors, std::string_view stages) {
  load_result r = parse_spark_load(executors, stages);
  CHECK_FALSE(r.load);
  return r.error;
}

}  // namespace

TEST_CASE("in local mode the driver's slots are the cluster's slots", "[load]") {
  spark_load l = parsed(local_executors, "[]");
  CHECK(l.slots == 8);
  CHECK(l.active == 3);
  CHECK(l.pending == 0);
  CHECK(utilization(l) == Approx(3.0 / 8));
}

TEST_CASE("in cluster mode only live executors hold slots", "[load]") {
  spark_load l = parsed(cluster_executors, cluster_stages);
  CHECK(l.slots == 8);       // executors 1 and 3; the driver and lost executor 2 hold none
  CHECK(l.active == 5);      // 0 + 4 + 1
  CHECK(l.pending == 155);   // (200 - 5 - 50) + (10 - 0 - 0)
  CHECK(utilization(l) == 1.0);
}

TEST_CASE("an idle cluster with only its driver has no slots", "[load]") {
  // Dynamic allocation removed every executor: the driver is alone but, in
  // cluster mode, holds no cores.
  const char* driver_only =
      R"([{"id":"driver","isActive":true,"totalCores":0,"maxTasks":0,"activeTasks":0}])";
  spark_load idle = parsed(driver_only, "[]");
  CHECK(idle.slots == 0);
  CHECK(utilization(idle) == 0.0);
  spark_load waiting = parsed(driver_only, R"([{"numTasks":3,"numActiveTasks":0,"numCompletedIndices":0}])");
  CHECK(waiting.pending == 3);
  CHECK(utilization(waiting) == 1.0);
}

TEST_CASE("the driver's active tasks count even in cluster mode", "[load]") {
  spark_load l = parsed(R"([{"id":"driver","totalCores":2,"maxTasks":2,"activeTasks":1},
                            {"id":"7","totalCores":4,"maxTasks":4,"activeTasks":2}])",
                        "[]");
  CHECK(l.slots == 4);
  CHECK(l.active == 3);
}

TEST_CASE("an executor without isActive counts as active", "[load]") {
  spark_load l = parsed(R"([{"id":"1","maxTasks":4,"activeTasks":1},
                            {"id":"2","maxTasks":2,"activeTasks":2,"isActive":true}])",
                        "[]");
  CHECK(l.slots == 6);
  CHECK(l.active == 3);
}

TEST_CASE("slots fall back to totalCores when maxTasks is absent", "[load]") {
  spark_load l = parsed(R"([{"id":"1","totalCores":6,"activeTasks":0},
                            {"id":"2","totalCores":16,"maxTasks":8,"activeTasks":0}])",
                        "[]");
  CHECK(l.slots == 14);  // maxTasks wins where present (spark.task.cpus = 2)
}

TEST_CASE("pending falls back to numCompleteTasks without numCompletedIndices", "[load]") {
  spark_load l = parsed(local_executors,
                        R"([{"stageId":1,"numTasks":40,"numActiveTasks":8,"numCompleteTasks":12}])");
  CHECK(l.pending == 20);
  // Both present: the index count is the one used.
  spark_load both = parsed(local_executors, R"([{"numTasks":40,"numActiveTasks":8,
                                                 "numCompleteTasks":15,"numCompletedIndices":12}])");
  CHECK(both.pending == 20);
}

TEST_CASE("a stage never contributes negative pending work", "[load]") {
  // Speculative copies run beside finished indices near the end of a stage.
  spark_load l = parsed(local_executors, R"([{"numTasks":10,"numActiveTasks":4,"numCompletedIndices":8},
                                             {"numTasks":10,"numActiveTasks":1,"numCompletedIndices":4}])");
  CHECK(l.pending == 5);
}

TEST_CASE("negative counts are clipped to zero", "[load]") {
  spark_load l = parsed(R"([{"id":"1","maxTasks":-4,"activeTasks":-3},
                            {"id":"2","maxTasks":4,"activeTasks":2}])",
                        R"([{"numTasks":10,"numActiveTasks":-10,"numCompletedIndices":-1}])");
  CHECK(l.slots == 4);
  CHECK(l.active == 2);
  CHECK(l.pending == 10);
}

TEST_CASE("malformed executors bodies are errors naming what is wrong", "[load]") {
  CHECK(error_of("", "[]") == "executors: not valid JSON");
  CHECK(error_of("<html>Not Found</html>", "[]") == "executors: not valid JSON");
  CHECK(error_of(R"([{"id":"1")", "[]") == "executors: not valid JSON");
  CHECK(error_of(R"({"id":"driver"})", "[]") == "executors: expected a JSON array");
  CHECK(error_of("null", "[]") == "executors: expected a JSON array");
  CHECK(error_of(R"([{"id":"1","maxTasks":4,"activeTasks":0}, 7])", "[]") ==
        "executors[1]: expected an object");
  CHECK(error_of(R"([{"id":"1","maxTasks":4,"activeTasks":"3"}])", "[]") ==
        "executors[0].activeTasks: expected a number");
  CHECK(error_of(R"([{"id":"1","maxTasks":4,"activeTasks":true}])", "[]") ==
        "executors[0].activeTasks: expected a number");
  CHECK(error_of(R"([{"id":"1","maxTasks":"4","activeTasks":0}])", "[]") ==
        "executors[0].maxTasks: expected a number");
  CHECK(error_of(R"([{"id":"1","totalCores":null,"activeTasks":0}])", "[]") ==
        "executors[0].totalCores: expected a number");
  CHECK(error_of(R"([{"id":"1","maxTasks":4}])", "[]") == "executors[0].activeTasks: missing");
  CHECK(error_of(R"([{"id":"1","activeTasks":0}])", "[]") ==
        "executors[0].maxTasks: missing (and no totalCores)");
  CHECK(error_of(R"([{"id":1,"maxTasks":4,"activeTasks":0}])", "[]") ==
        "executors[0].id: expected a string");
  CHECK(error_of(R"([{"maxTasks":4,"activeTasks":0}])", "[]") == "executors[0].id: missing");
  CHECK(error_of(R"([{"id":"1","isActive":"yes","maxTasks":4,"activeTasks":0}])", "[]") ==
        "executors[0].isActive: expected a boolean");
}

TEST_CASE("malformed stages bodies are errors naming what is wrong", "[load]") {
  CHECK(error_of(local_executors, "") == "stages: not valid JSON");
  CHECK(error_of(local_executors, "[{]") == "stages: not valid JSON");
  CHECK(error_of(local_executors, R"({"stages":[]})") == "stages: expected a JSON array");
  CHECK(error_of(local_executors, R"([{"numTasks":4,"numActiveTasks":0,"numCompletedIndices":0},
                                     {"numTasks":"4","numActiveTasks":0,"numCompletedIndices":0}])") ==
        "stages[1].numTasks: expected a number");
  CHECK(error_of(local_executors, R"([{"numTasks":4,"numCompletedIndices":0}])") ==
        "stages[0].numActiveTasks: missing");
  CHECK(error_of(local_executors, R"([{"numTasks":4,"numActiveTasks":1}])") ==
        "stages[0].numCompletedIndices: missing (and no numCompleteTasks)");
  CHECK(error_of(local_executors, R"([{"numTasks":4,"numActiveTasks":1,"numCompleteTasks":[]}])") ==
        "stages[0].numCompleteTasks: expected a number");
  CHECK(error_of(local_executors, "[[]]") == "stages[0]: expected an object");
}

TEST_CASE("the executors error is reported when both bodies are bad", "[load]") {
  CHECK(error_of("{}", "{}") == "executors: expected a JSON array");
}

TEST_CASE("huge numbers are out of range, not infinite load", "[load]") {
  CHECK(error_of(R"([{"id":"1","maxTasks":1e300,"activeTasks":0}])", "[]") ==
        "executors[0].maxTasks: number out of range");
  CHECK(error_of(R"([{"id":"1","maxTasks":4,"activeTasks":123456789012345678901234567890}])", "[]") ==
        "executors[0].activeTasks: number out of range");
  CHECK(error_of(R"([{"id":"1","maxTasks":4,"activeTasks":18446744073709551615}])", "[]") ==
        "executors[0].activeTasks: number out of range");
  CHECK(error_of(local_executors, R"([{"numTasks":1e16,"numActiveTasks":0,"numCompletedIndices":0}])") ==
        "stages[0].numTasks: number out of range");
  // Beyond a double's range the JSON parser itself refuses the number.
  CHECK(error_of(R"([{"id":"1","maxTasks":1e400,"activeTasks":0}])", "[]") == "executors: not valid JSON");
  // Very negative is still just clipped.
  CHECK(parsed(R"([{"id":"1","maxTasks":4,"activeTasks":-1e300}])", "[]").active == 0);
  // Large but plausible counts pass through.
  CHECK(parsed(R"([{"id":"1","maxTasks":1000000000000,"activeTasks":0}])", "[]").slots == 1e12);
}

TEST_CASE("deeply nested input is an error, not a stack overflow", "[load]") {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(error_of(deep, "[]") == "executors[0]: expected an object");
  CHECK(error_of(local_executors, std::string(100000, '[')) == "stages: not valid JSON");
}

TEST_CASE("no input crashes the parser", "[load]") {
  std::mt19937 rng(20240502);
  auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  const std::vector<std::string> seeds = {local_executors, cluster_executors, cluster_stages,
                                          R"([{"id":"app-1","name":"Spark Connect"}])"};
  const std::vector<std::string> keys = {"id", "isActive", "maxTasks", "totalCores", "activeTasks",
                                         "numTasks", "numActiveTasks", "numCompletedIndices",
                                         "numCompleteTasks", "x"};
  // A random JSON value drawn toward the shapes the parser looks for.
  std::function<nlohmann::json(int)> random_value = [&](int depth) -> nlohmann::json {
    switch (below(depth > 2 ? 8 : 10)) {
      case 0: return nullptr;
      case 1: return below(2) == 0;
      case 2: return static_cast<std::int64_t>(rng()) - (1ll << 31);
      case 3: return std::ldexp(static_cast<double>(rng()), static_cast<int>(below(2100)) - 1050);
      case 4: return "driver";
      case 5: return std::string(below(5), static_cast<char>('a' + below(26)));
      case 6: return static_cast<std::int64_t>(below(16));
      case 7: return -static_cast<std::int64_t>(below(4));
      case 8: {
        auto a = nlohmann::json::array();
        for (std::size_t i = below(4); i > 0; --i) a.push_back(random_value(depth + 1));
        return a;
      }
      default: {
        auto o = nlohmann::json::object();
        for (std::size_t i = below(6); i > 0; --i) o[keys[below(keys.size())]] = random_value(depth + 1);
        return o;
      }
    }
  };
  auto random_input = [&](int kind) -> std::string {
    if (kind == 0) {  // raw bytes
      std::string s(below(64), '\0');
      for (char& c : s) c = static_cast<char>(below(256));
      return s;
    }
    if (kind == 1) {  // a real body with a few bytes changed, dropped or cut off
      std::string s = seeds[below(seeds.size())];
      for (std::size_t edits = 1 + below(4); edits > 0 && !s.empty(); --edits) {
        std::size_t at = below(s.size());
        switch (below(3)) {
          case 0: s[at] = static_cast<char>(below(256)); break;
          case 1: s.erase(at, 1 + below(8)); break;
          default: s.resize(at); break;
        }
      }
      return s;
    }
    if (kind == 2) {  // well-formed JSON of any shape
      auto a = nlohmann::json::array();
      for (std::size_t i = below(5); i > 0; --i) a.push_back(random_value(1));
      return below(4) == 0 ? random_value(0).dump() : a.dump();
    }
    // Entries with the expected fields, now and then missing one or holding
    // an odd value, so the counting paths run too.
    auto a = nlohmann::json::array();
    for (std::size_t i = below(5); i > 0; --i) {
      auto entry = nlohmann::json::object();
      for (const auto& key : keys) {
        if (below(12) == 0) continue;
        if (below(8) == 0) {
          entry[key] = random_value(1);
        } else if (key == "id") {
          entry[key] = below(3) == 0 ? "driver" : std::to_string(below(9));
        } else if (key == "isActive") {
          entry[key] = below(4) != 0;
        } else {
          entry[key] = static_cast<std::int64_t>(below(40)) - 4;
        }
      }
      a.push_back(entry);
    }
    return a.dump();
  };

  int ok = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string executors = random_input(i % 4);
    std::string stages = random_input(static_cast<int>(below(4)));
    load_result r = parse_spark_load(executors, stages);
    // Exactly one of load and error, and a load is finite and non-negative.
    if (r.load) {
      ++ok;
      REQUIRE(r.error.empty());
      REQUIRE(std::isfinite(r.load->slots));
      REQUIRE(std::isfinite(r.load->active));
      REQUIRE(std::isfinite(r.load->pending));
      REQUIRE(r.load->slots >= 0);
      REQUIRE(r.load->active >= 0);
      REQUIRE(r.load->pending >= 0);
      double u = utilization(*r.load);
      REQUIRE(u >= 0);
      REQUIRE(u <= 1);
    } else {
      REQUIRE_FALSE(r.error.empty());
    }
    std::string error;
    std::string id = app_id_from_applications(executors, error);
    REQUIRE(id.empty() != error.empty());
  }
  // The structured inputs must reach the success path now and then, or the
  // loop only exercised the JSON parser.
  CHECK(ok > 20);
}

TEST_CASE("the application id is the first listed", "[load]") {
  std::string error;
  const char* body = R"([ {
    "id" : "local-1714641243117",
    "name" : "Spark Connect server",
    "attempts" : [ { "startTime" : "2024-05-02T09:14:02.312GMT", "endTime" : "1969-12-31T23:59:59.999GMT",
                     "lastUpdated" : "2024-05-02T09:14:02.312GMT", "duration" : 0, "sparkUser" : "spark",
                     "completed" : false, "appSparkVersion" : "3.5.1" } ]
  }, { "id" : "app-other", "name" : "other" } ])";
  CHECK(app_id_from_applications(body, error) == "local-1714641243117");
  CHECK(error.empty());
}

TEST_CASE("a malformed or empty applications list gives no id", "[load]") {
  auto error_for = [](std::string_view body) {
    std::string error;
    CHECK(app_id_from_applications(body, error).empty());
    return error;
  };
  CHECK(error_for("") == "applications: not valid JSON");
  CHECK(error_for("[") == "applications: not valid JSON");
  CHECK(error_for(R"({"id":"app-1"})") == "applications: expected a JSON array");
  CHECK(error_for("[]") == "applications: no application listed");
  CHECK(error_for(R"(["app-1"])") == "applications[0]: expected an object");
  CHECK(error_for(R"([{"name":"x"}])") == "applications[0].id: expected a non-empty string");
  CHECK(error_for(R"([{"id":17}])") == "applications[0].id: expected a non-empty string");
  CHECK(error_for(R"([{"id":""}])") == "applications[0].id: expected a non-empty string");
}

TEST_CASE("utilization is busy work over slots, clipped to one", "[load]") {
  CHECK(utilization({8, 2, 2}) == Approx(0.5));
  CHECK(utilization({8, 8, 0}) == 1.0);
  CHECK(utilization({8, 8, 200}) == 1.0);
  CHECK(utilization({8, 0, 0}) == 0.0);
}

TEST_CASE("with no slots any work means full utilization", "[load]") {
  CHECK(utilization({0, 0, 0}) == 0.0);
  CHECK(utilization({0, 1, 0}) == 1.0);
  CHECK(utilization({0, 0, 1}) == 1.0);
}

TEST_CASE("utilization stays in range for values the parser never produces", "[load]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(utilization({-8, 1, 0}) == 1.0);  // negative slots count as none
  CHECK(utilization({8, -4, -4}) == 0.0);
  CHECK(utilization({nan, 1, 0}) == 1.0);
  CHECK(utilization({8, nan, nan}) == 0.0);
  CHECK(utilization({8, inf, 0}) == 1.0);
  CHECK(utilization({inf, 4, 0}) == 0.0);
  CHECK(utilization({inf, inf, 0}) == 1.0);
}

TEST_CASE("the first sample sets the average", "[load]") {
  ewma e(0.3);
  CHECK_FALSE(e.value());
  e.add(0.8);
  REQUIRE(e.value());
  CHECK(*e.value() == 0.8);
}

TEST_CASE("later samples move the average by alpha", "[load]") {
  ewma e(0.5);
  e.add(0);
  e.add(1);
  CHECK(*e.value() == Approx(0.5));
  e.add(1);
  CHECK(*e.value() == Approx(0.75));
}

TEST_CASE("the average converges on a constant load", "[load]") {
  ewma e(0.3);
  e.add(0);
  double previous = 0;
  for (int i = 0; i < 60; ++i) {
    e.add(1);
    CHECK(*e.value() > previous);
    CHECK(*e.value() <= 1);
    previous = *e.value();
  }
  CHECK(*e.value() == Approx(1).margin(1e-9));
}

TEST_CASE("alpha one follows every sample", "[load]") {
  ewma e(1);
  for (double s : {0.2, 0.9, 0.0, 0.45}) {
    e.add(s);
    CHECK(*e.value() == s);
  }
}

TEST_CASE("alpha is clipped and non-finite samples are ignored", "[load]") {
  ewma high(7);  // as alpha 1
  high.add(0.1);
  high.add(0.6);
  CHECK(*high.value() == 0.6);
  ewma low(-1);  // as alpha 0: the first sample sticks
  low.add(0.1);
  low.add(0.6);
  CHECK(*low.value() == 0.1);
  ewma e(0.5);
  e.add(std::numeric_limits<double>::quiet_NaN());
  CHECK_FALSE(e.value());
  e.add(0.4);
  e.add(std::numeric_limits<double>::infinity());
  CHECK(*e.value() == 0.4);
}

TEST_CASE("reset forgets the average", "[load]") {
  ewma e(0.3);
  e.add(0.9);
  e.reset();
  CHECK_FALSE(e.value());
  e.add(0.2);
  CHECK(*e.value() == 0.2);
}
