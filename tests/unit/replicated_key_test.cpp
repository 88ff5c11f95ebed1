#include <catch2/catch.hpp>

#include "core/replicated_key.hpp"

using namespace scg::core;

TEST_CASE("replicated keys keep the bytes every release exchanges", "[replicated_key]") {
  CHECK(make_key(key_kind::session, "t\x1fu\x1fid") == "s/t\x1fu\x1fid");
  CHECK(make_key(key_kind::operation, "op") == "o/op");
  CHECK(make_key(key_kind::drain, "sc-1") == "d/sc-1");
  CHECK(make_key(key_kind::health, "sc-1") == "h/sc-1");
  CHECK(make_key(key_kind::load, "sc-1") == "l/sc-1");
  CHECK(make_key(key_kind::activity, "node\nsc-1") == "a/node\nsc-1");
}

TEST_CASE("a key parses back into its kind and id", "[replicated_key]") {
  for (auto k : {key_kind::session, key_kind::operation, key_kind::drain, key_kind::health, key_kind::load,
                 key_kind::activity}) {
    const auto key = make_key(k, "x/y");  // the id is a view into it
    auto p = parse_key(key);
    REQUIRE(p);
    CHECK(p->kind == k);
    CHECK(p->id == "x/y");
    CHECK(has_kind(make_key(k, "x"), k));
  }
  CHECK_FALSE(parse_key("z/new-kind"));  // a newer peer's kind
  CHECK_FALSE(parse_key("s"));
  CHECK_FALSE(parse_key("sx"));
  CHECK(parse_key("s/")->id.empty());
  CHECK_FALSE(has_kind("o/x", key_kind::session));
  CHECK(is_binding_key("s/a"));
  CHECK(is_binding_key("o/a"));
  CHECK_FALSE(is_binding_key("h/a"));
  CHECK_FALSE(is_binding_key("q/a"));
  CHECK(std::string(to_string(key_kind::activity)) == "activity");
}

TEST_CASE("typed values read what the writers write", "[replicated_key]") {
  CHECK(health_value(true) == "healthy");
  CHECK(health_value(false) == "unhealthy");
  CHECK(parse_health(health_value(true)) == true);
  CHECK(parse_health(health_value(false)) == false);
  CHECK_FALSE(parse_health("ill"));
  CHECK(load_value(0.25) == "0.250000");  // std::to_string, as every release wrote it
  CHECK(parse_load(load_value(0.25)) == Approx(0.25));
  CHECK(parse_load("1.5abc") == Approx(1.5));  // strtod's reading, as before
  CHECK_FALSE(parse_load("none"));
  CHECK(drain_value == "draining");
}
