#include <catch2/catch.hpp>

#include <string>

#include "core/address.hpp"

using scg::core::bracketed;
using scg::core::host_port;
using scg::core::parse_host_port;
using scg::core::parse_url;

namespace {

/// "host|port" of what parse_host_port read, "(refused)" when nothing.
std::string read(const char* text, bool allow_zero = false) {
  auto hp = parse_host_port(text, allow_zero);
  return hp ? hp->host + "|" + std::to_string(hp->port) : "(refused)";
}

/// "scheme|host|port|path" of what parse_url read, "(refused)" when nothing.
std::string read_url(const char* text) {
  auto u = parse_url(text);
  return u ? u->scheme + "|" + u->host + "|" + std::to_string(u->port) + "|" + u->path : "(refused)";
}

}  // namespace

TEST_CASE("host:port reads names, IPv4 and bracketed IPv6, brackets dropped", "[address]") {
  CHECK(read("localhost:1") == "localhost|1");
  CHECK(read("spark-connect-0.svc.cluster.local:15002") == "spark-connect-0.svc.cluster.local|15002");
  CHECK(read("A-1.b2:80") == "A-1.b2|80");
  CHECK(read("10.0.0.1:15002") == "10.0.0.1|15002");
  CHECK(read("[::1]:15002") == "::1|15002");
  CHECK(read("[fd00::2]:7400") == "fd00::2|7400");
  CHECK(read("[::ffff:10.0.0.1]:7") == "::ffff:10.0.0.1|7");
}

TEST_CASE("a port is 1 to 65535 in plain digits, 0 only for a listener that may pick one", "[address]") {
  CHECK(read("a:65535") == "a|65535");
  CHECK(read("a:00080") == "a|80");
  for (const char* bad : {"a:65536", "a:123456", "a:-1", "a:+1", "a:1x", "a: 1", "a:0x10"})
    CHECK(read(bad) == "(refused)");
  CHECK(read("host:0") == "(refused)");
  CHECK(read("0.0.0.0:0") == "(refused)");
  CHECK(read("0.0.0.0:0", true) == "0.0.0.0|0");
  CHECK(read("[::]:0", true) == "::|0");
  CHECK(read("a:65536", true) == "(refused)");
}

TEST_CASE("host:port refuses a missing host or port, junk and unbracketed IPv6", "[address]") {
  for (const char* bad :
       {"",          ":1",          "host",        "host:",       "*:1",        "ho st:1",     "-host:1",
        "host-:1",   "a..b:1",      ".a:1",        "a.:1",        "999.1.1.1:1", "1.2.3:1",     "::1:15002",
        "[::1]15002", "[::1]:",     "[nothost]:1", "[::1:1",      "[]:1",       "[::1]",       "under_score:1",
        "host:1:2",  "user@host:1", "[::1]]:1",    "a]:1",        "host:1/x"})
    CHECK(read(bad) == "(refused)");
  CHECK(read(std::string(64, 'a').append(":1").c_str()) == "(refused)");  // a label over 63
}

TEST_CASE("host:port is written back with an IPv6 host in brackets", "[address]") {
  CHECK(host_port{"10.0.0.1", 15002}.str() == "10.0.0.1:15002");
  CHECK(host_port{"spark-0.spark", 1}.str() == "spark-0.spark:1");
  CHECK(host_port{"fd00::5", 7400}.str() == "[fd00::5]:7400");
  CHECK(bracketed("fd00::5") == "[fd00::5]");
  CHECK(bracketed("10.0.0.1") == "10.0.0.1");
  for (const char* text : {"localhost:1", "10.0.0.1:65535", "[::1]:15002", "[fd00::2]:7400"})
    CHECK(parse_host_port(text)->str() == text);
}

TEST_CASE("a URL without a port gets its scheme's, without a path gets /", "[address]") {
  CHECK(read_url("http://collector") == "http|collector|80|/");
  CHECK(read_url("https://idp.example.com") == "https|idp.example.com|443|/");
  CHECK(read_url("https://[fd00::7]/v1/traces") == "https|fd00::7|443|/v1/traces");
  CHECK(read_url("http://collector:4318/v1/traces") == "http|collector|4318|/v1/traces");
  CHECK(read_url("http://127.0.0.1:8001") == "http|127.0.0.1|8001|/");
  CHECK(read_url("https://[::1]:8443/") == "https|::1|8443|/");
}

TEST_CASE("a URL keeps its query in the path and drops its fragment", "[address]") {
  CHECK(read_url("https://idp/keys?tenant=a") == "https|idp|443|/keys?tenant=a");
  CHECK(read_url("https://idp?tenant=a") == "https|idp|443|/?tenant=a");
  CHECK(read_url("https://idp/keys#top") == "https|idp|443|/keys");
  CHECK(read_url("https://idp#top") == "https|idp|443|/");
}

TEST_CASE("a URL with another scheme, no host or a bad host or port is refused", "[address]") {
  for (const char* bad :
       {"", "collector:4318", "grpc://collector:4317", "HTTP://collector", "http:/collector", "http://",
        "http:///v1/traces", "http://collector:/x", "http://collector:0/x", "http://collector:99999/v1/traces",
        "http://user@collector/x", "http://user:pw@collector/x", "http://::1/x", "http://[::1/x", "http://a b/x",
        "http://[::1]x/"})
    CHECK(read_url(bad) == "(refused)");
}

TEST_CASE("a URL's origin names its port and reads back as the same place", "[address]") {
  CHECK(parse_url("http://collector/v1/traces")->origin() == "http://collector:80");
  CHECK(parse_url("https://[fd00::7]:8443/x")->origin() == "https://[fd00::7]:8443");
  for (const char* text : {"http://collector:4318/v1/traces", "https://idp.example.com/keys", "https://[::1]/x"}) {
    const auto u = parse_url(text);
    REQUIRE(u);
    const auto again = parse_url(u->origin());
    REQUIRE(again);
    CHECK(again->scheme == u->scheme);
    CHECK(again->host == u->host);
    CHECK(again->port == u->port);
    CHECK(again->path == "/");
    CHECK(parse_url(u->origin() + u->path)->path == u->path);
  }
}
