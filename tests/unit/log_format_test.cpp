#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/log_format.hpp"

using scg::core::message_members;

namespace {
nlohmann::json as_object(const std::string& members) { return nlohmann::json::parse("{" + members + "}"); }
}  // namespace

TEST_CASE("a log message becomes JSON members: the event, then its key=value pairs", "[log]") {
  auto j = as_object(message_members(R"(backend_unavailable request_id=ab12 backend=sc-1 reason="connect failed: \"refused\"")"));
  CHECK(j["event"] == "backend_unavailable");
  CHECK(j["request_id"] == "ab12");
  CHECK(j["backend"] == "sc-1");
  CHECK(j["reason"] == R"(connect failed: "refused")");
}

TEST_CASE("words that are not key=value are kept under text - odd input never throws", "[log]") {
  auto j = as_object(message_members("stopped after a while code=0"));
  CHECK(j["event"] == "stopped");
  CHECK(j["text"] == "after a while");
  CHECK(j["code"] == "0");
  CHECK(as_object(message_members(""))["event"] == "");
  CHECK(as_object(message_members("x k=\"unterminated"))["k"] == "unterminated");
  CHECK_NOTHROW(as_object(message_members(std::string("bad utf8 v=\xff\xfe"))));
}

TEST_CASE("a message that is a JSON object is merged as it is", "[log]") {
  auto j = as_object(message_members(R"({"event":"auth.failure","reason":"token expired"})"));
  CHECK(j["event"] == "auth.failure");
  CHECK(j["reason"] == "token expired");
}
