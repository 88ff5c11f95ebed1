#include "auth/rewrite.hpp"

#include <catch2/catch.hpp>

#include <string>

#include "core/protowire.hpp"
#include "spark_connect.pb.h"

using namespace scg::auth;
namespace pw = scg::core::protowire;

namespace {

std::string user_context(const std::string& user_id, const std::string& extra = "") {
  std::string uc;
  if (!user_id.empty()) pw::put_bytes(uc, 1, user_id);
  pw::put_bytes(uc, 2, "Mallory M.");
  return uc + extra;
}

/// UserContext.extensions (999): an Any our subset proto does not declare.
std::string extension() {
  std::string any;
  pw::put_bytes(any, 1, "type.googleapis.com/example.Ext");
  pw::put_bytes(any, 2, std::string("\x08\x01", 2));
  std::string field;
  pw::put_bytes(field, 999, any);
  return field;
}

}  // namespace

TEST_CASE("the verified user replaces user_context.user_id and every other byte stays",
          "[auth][rewrite]") {
  std::string before, after;
  pw::put_bytes(before, 1, "session-1");
  std::string tail;
  pw::put_bytes(tail, 3, std::string("\x0a\x02\x08\x01plan", 8));
  pw::put_uint(tail, 4242, 7);                                     // an unknown field
  tail += std::string("\x19\x01\x02\x03\x04\x05\x06\x07\x08", 9);  // unknown fixed64, field 3
  std::string uc = user_context("mallory", extension());
  std::string request = before;
  pw::put_bytes(request, 2, uc);
  request += tail;

  auto out = rewrite_user_id(request, "alice");
  REQUIRE(out);
  // Byte-exact: user_id leads the rewritten UserContext, the rest is untouched.
  std::string expected_uc;
  pw::put_bytes(expected_uc, 1, "alice");
  expected_uc += user_context("", extension());
  std::string expected = before;
  pw::put_bytes(expected, 2, expected_uc);
  expected += tail;
  CHECK(*out == expected);

  spark::connect::ExecutePlanRequest parsed;
  REQUIRE(parsed.ParseFromString(*out));
  CHECK(parsed.session_id() == "session-1");
  CHECK(parsed.user_context().user_id() == "alice");
  CHECK(parsed.user_context().user_name() == "Mallory M.");
  CHECK(parsed.user_context()
            .GetReflection()
            ->GetUnknownFields(parsed.user_context())
            .field_count() == 1);
}

TEST_CASE("a request without user_context gets one", "[auth][rewrite]") {
  spark::connect::ConfigRequest req;
  req.set_session_id("s");
  req.set_client_type("pyspark");
  auto out = rewrite_user_id(req.SerializeAsString(), "bob");
  REQUIRE(out);
  spark::connect::ConfigRequest parsed;
  REQUIRE(parsed.ParseFromString(*out));
  CHECK(parsed.user_context().user_id() == "bob");
  CHECK(parsed.client_type() == "pyspark");
  CHECK(parsed.session_id() == "s");

  auto empty = rewrite_user_id("", "bob");
  REQUIRE(empty);
  REQUIRE(parsed.ParseFromString(*empty));
  CHECK(parsed.user_context().user_id() == "bob");
}

TEST_CASE("every user_context occurrence is rewritten, so protobuf merging cannot smuggle a user",
          "[auth][rewrite]") {
  std::string request;
  pw::put_bytes(request, 1, "s");
  pw::put_bytes(request, 2, user_context("mallory"));
  pw::put_bytes(request, 2, user_context("eve"));
  std::string uc_twice;  // two user_id fields in one UserContext
  pw::put_bytes(uc_twice, 1, "x");
  pw::put_bytes(uc_twice, 1, "y");
  pw::put_bytes(request, 2, uc_twice);
  auto out = rewrite_user_id(request, "alice");
  REQUIRE(out);
  spark::connect::AnalyzePlanRequest parsed;
  REQUIRE(parsed.ParseFromString(*out));
  CHECK(parsed.user_context().user_id() == "alice");
  CHECK(out->find("mallory") == std::string::npos);
  CHECK(out->find("eve") == std::string::npos);
}

TEST_CASE("every streamed AddArtifacts message is rewritten", "[auth][rewrite]") {
  for (int i = 0; i < 3; ++i) {
    spark::connect::AddArtifactsRequest req;
    req.set_session_id("s");
    req.mutable_user_context()->set_user_id("mallory");
    req.set_chunk(std::string(1000 + i, 'x'));
    auto out = rewrite_user_id(req.SerializeAsString(), "alice");
    REQUIRE(out);
    spark::connect::AddArtifactsRequest parsed;
    REQUIRE(parsed.ParseFromString(*out));
    CHECK(parsed.user_context().user_id() == "alice");
    CHECK(parsed.chunk() == req.chunk());
  }
}

TEST_CASE("malformed requests are refused rather than rewritten", "[auth][rewrite]") {
  spark::connect::ExecutePlanRequest req;
  req.set_session_id("session");
  req.mutable_user_context()->set_user_id("mallory");
  std::string bytes = req.SerializeAsString();
  for (std::size_t cut = 1; cut < bytes.size(); ++cut) {
    INFO(cut);
    std::string prefix = bytes.substr(0, cut);
    // A prefix that ends on a field boundary is a valid (shorter) message.
    spark::connect::ExecutePlanRequest probe;
    if (probe.ParseFromString(prefix)) continue;
    CHECK_FALSE(rewrite_user_id(prefix, "alice"));
  }
  CHECK_FALSE(rewrite_user_id(std::string("\x0c", 1), "alice"));          // end-group with no group
  CHECK_FALSE(rewrite_user_id(std::string("\x0b\x10\x01", 3), "alice"));  // unterminated group
  CHECK_FALSE(rewrite_user_id(std::string("\x12\x02\x0a\x05", 4), "alice"));  // bad UserContext
  std::string group("\x1b\x10\x01\x1c", 4);  // a whole group (field 3) is kept
  auto out = rewrite_user_id(group, "alice");
  REQUIRE(out);
  CHECK(out->substr(0, 4) == group);
}

TEST_CASE("the backend token is redacted from Config responses", "[auth][rewrite]") {
  spark::connect::ConfigResponse resp;
  resp.set_session_id("s");
  auto* token = resp.add_pairs();
  token->set_key(std::string(authenticate_token_key));
  token->set_value("backend-secret");
  auto* other = resp.add_pairs();
  other->set_key("spark.sql.shuffle.partitions");
  other->set_value("8");
  resp.add_pairs()->set_key(std::string(authenticate_token_key));  // no value
  resp.add_warnings("w");
  resp.set_server_side_session_id("srv");

  std::string out;
  REQUIRE(redact_config_response(resp.SerializeAsString(), out) == redact_outcome::redacted);
  CHECK(out.find("backend-secret") == std::string::npos);
  spark::connect::ConfigResponse parsed;
  REQUIRE(parsed.ParseFromString(out));
  REQUIRE(parsed.pairs_size() == 3);
  CHECK(parsed.pairs(0).key() == authenticate_token_key);
  CHECK(parsed.pairs(0).value() == "[redacted]");
  CHECK(parsed.pairs(1).value() == "8");
  CHECK(parsed.pairs(2).value() == "[redacted]");
  CHECK(parsed.warnings(0) == "w");
  CHECK(parsed.server_side_session_id() == "srv");
}

TEST_CASE("Config responses without the token pass unchanged - malformed ones are flagged",
          "[auth][rewrite]") {
  spark::connect::ConfigResponse resp;
  resp.set_session_id("s");
  auto* kv = resp.add_pairs();
  kv->set_key("spark.connect.authenticate.token.other");
  kv->set_value("v");
  std::string out = "untouched";
  CHECK(redact_config_response(resp.SerializeAsString(), out) == redact_outcome::unchanged);
  CHECK(out == "untouched");
  CHECK(redact_config_response(std::string("\x12\x05\x0a", 3), out) == redact_outcome::malformed);
  CHECK(redact_config_response(std::string("\x12\x02\x0a\x09", 4), out) ==
        redact_outcome::malformed);
}

TEST_CASE("get_all with a prefix cannot read the token under its stripped key, nor under any key by value",
          "[auth][rewrite]") {
  CHECK(names_token_setting("spark.connect.authenticate.token"));
  CHECK(names_token_setting("token"));
  CHECK(names_token_setting("authenticate.token"));
  CHECK_FALSE(names_token_setting("oken"));
  CHECK_FALSE(names_token_setting("spark.token"));
  CHECK_FALSE(names_token_setting(""));

  spark::connect::ConfigResponse resp;
  auto* stripped = resp.add_pairs();  // get_all(prefix = "spark.connect.authenticate.")
  stripped->set_key("token");
  stripped->set_value("backend-secret");
  auto* elsewhere = resp.add_pairs();  // the same value under a key of the user's choice
  elsewhere->set_key("spark.my.copy");
  elsewhere->set_value("backend-secret");
  auto* other = resp.add_pairs();
  other->set_key("spark.my.other");
  other->set_value("backend-secret-not");
  std::string out;
  REQUIRE(redact_config_response(resp.SerializeAsString(), out, {"", "backend-secret"}) ==
          redact_outcome::redacted);
  spark::connect::ConfigResponse parsed;
  REQUIRE(parsed.ParseFromString(out));
  CHECK(parsed.pairs(0).value() == "[redacted]");
  CHECK(parsed.pairs(1).value() == "[redacted]");
  CHECK(parsed.pairs(2).value() == "backend-secret-not");
}
