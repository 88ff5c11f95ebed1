// The artifact spool (net/artifact_spool.hpp): one file per AddArtifacts
// call, read back as written, deleted with its last reference, and bounded
// per session and in all.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/protowire.hpp"
#include "net/artifact_spool.hpp"

using namespace scg::net;
namespace pw = scg::core::protowire;
namespace fs = std::filesystem;

namespace {

std::string field(std::uint32_t number, const std::string& payload) {
  std::string out;
  pw::put_bytes(out, number, payload);
  return out;
}

segments seg(const std::string& s) { return {{reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}}; }

/// A parent directory of spools, removed at the end.
struct parent_dir {
  std::string path;
  parent_dir() {
    char tmpl[] = "/tmp/scg-spool-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    path = tmpl;
  }
  ~parent_dir() { fs::remove_all(path); }
};

std::size_t files_in(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

std::shared_ptr<artifact_spool> open_spool(const parent_dir& p, spool_limits limits = {}) {
  std::string error;
  auto spool = artifact_spool::open(p.path, limits, error);
  INFO(error);
  REQUIRE(spool);
  return spool;
}

}  // namespace

TEST_CASE("A spooled call reads back as written, and its file goes with its last reference", "[artifact_spool]") {
  parent_dir p;
  auto spool = open_spool(p);
  CHECK(fs::path(spool->dir()).parent_path() == p.path);
  std::shared_ptr<const spooled_call> call;
  {
    auto w = spool->start("k");
    w->append("first");
    w->append(std::string(100000, 'x'));
    w->append("");
    CHECK(spool->bytes() == 5 + 100000 + 3 * 4);
    call = w->commit();
  }
  REQUIRE(call);
  CHECK(spool->session_bytes("k") == call->bytes());
  artifact_spool::reader r(call->path());
  std::string m;
  REQUIRE(r.next(m));
  CHECK(m == "first");
  REQUIRE(r.next(m));
  CHECK(m == std::string(100000, 'x'));
  REQUIRE(r.next(m));
  CHECK(m.empty());
  CHECK(!r.next(m));
  CHECK(r.error().empty());
  CHECK(files_in(spool->dir()) == 1);
  call.reset();
  CHECK(files_in(spool->dir()) == 0);
  CHECK(spool->bytes() == 0);
  CHECK(spool->session_bytes("k") == 0);

  // A call that did not succeed leaves nothing.
  {
    auto w = spool->start("k");
    w->append("lost");
  }
  CHECK(files_in(spool->dir()) == 0);
  CHECK(spool->bytes() == 0);

  // A file cut short is an error, not a short message.
  {
    auto w = spool->start("k");
    w->append("whole message");
    call = w->commit();
  }
  ::truncate(call->path().c_str(), 10);
  artifact_spool::reader cut(call->path());
  CHECK(!cut.next(m));
  CHECK(cut.error().find("cut short") != std::string::npos);
  // A length scg never wrote is an error, not an allocation.
  std::ofstream(call->path(), std::ios::binary | std::ios::trunc) << std::string("\xff\xff\xff\xff", 4);
  artifact_spool::reader huge(call->path());
  CHECK(!huge.next(m));
  CHECK(huge.error().find("claims") != std::string::npos);
}

TEST_CASE("The spool bounds a session's artifacts and all of them, before writing", "[artifact_spool]") {
  parent_dir p;
  auto spool = open_spool(p, {1000, 1500});
  auto w = spool->start("a");
  w->append(std::string(600, 'a'));
  auto kept = w->commit();
  REQUIRE(kept);
  auto over = spool->start("a");
  over->append(std::string(600, 'a'));  // 1208 bytes for "a": past its 1000
  CHECK(over->failed() == unreplayable::artifacts_too_large);
  CHECK(!over->commit());
  CHECK(spool->session_bytes("a") == 604);
  auto b = spool->start("b");
  b->append(std::string(800, 'b'));
  auto full = spool->start("c");
  full->append(std::string(200, 'c'));  // 604 + 804 + 204 > 1500
  CHECK(full->failed() == unreplayable::spool_full);
  CHECK(spool->bytes() == 604 + 804);
  CHECK(files_in(spool->dir()) == 2);  // a's, and b's under way
  b.reset();
  CHECK(spool->bytes() == 604);
  CHECK(files_in(spool->dir()) == 1);
}

TEST_CASE("A spool removes what dead scg processes left, and its own directory at its end", "[artifact_spool]") {
  parent_dir p;
  const auto dead = p.path + "/scg-spool-999999999";  // above any pid_max
  const auto live = p.path + "/scg-spool-" + std::to_string(::getppid());
  const auto other = p.path + "/not-a-spool";
  for (const auto& d : {dead, live, other}) {
    fs::create_directory(d);
    std::ofstream(d + "/1") << "x";
  }
  std::string dir;
  {
    auto spool = open_spool(p);
    dir = spool->dir();
    CHECK(!fs::exists(dead));
    CHECK(fs::exists(live));
    CHECK(fs::exists(other));
    CHECK(fs::exists(dir));
  }
  CHECK(!fs::exists(dir));

  std::string error;
  CHECK(!artifact_spool::open("/proc/no-such-dir", {}, error));
  CHECK(error.find("/proc/no-such-dir") != std::string::npos);
}

TEST_CASE("AddArtifacts messages: their names, and the form spooled without the observed id", "[artifact_spool]") {
  const auto one = [](const std::string& name) { return field(1, field(1, name) + field(2, field(1, "data"))); };
  const std::string batch = field(1, "s-1") + field(2, field(1, "alice")) +
                            field(3, one("cache/abc") + one("pyfiles/m.py")) + field(6, "python") +
                            field(7, "11111111-2222-3333-4444-555555555555");
  const auto form = artifact_form(seg(batch));
  CHECK(form == field(1, "s-1") + field(2, field(1, "alice")) + field(3, one("cache/abc") + one("pyfiles/m.py")) +
                    field(6, "python"));
  CHECK(artifact_names(form) == std::vector<std::string>{"cache/abc", "pyfiles/m.py"});
  const std::string begin = field(1, "s-1") + field(4, field(1, "jars/big.jar") + field(4, field(1, "part")));
  CHECK(artifact_names(begin) == std::vector<std::string>{"jars/big.jar"});
  CHECK(artifact_names(field(1, "s-1") + field(5, field(1, "more"))).empty());
  CHECK(artifact_names("\xff\xff").empty());  // not wire data: no names, no crash
}

TEST_CASE("A journal lets go of an artifact's file when the artifact is added again or the session goes",
          "[artifact_spool][session_journal]") {
  parent_dir p;
  auto spool = open_spool(p);
  journal_store store({1 << 20, 1 << 20}, spool);
  auto upload = [&](const std::vector<std::string>& names) {
    auto w = spool->start("k");
    w->append("payload");
    journal_verdict v;
    v.what = journal_verdict::kind::record;
    for (const auto& n : names) v.names.push_back("artifact:" + n);
    store.record("k", v, rpc::add_artifacts, {}, w->commit());
  };
  upload({"cache/a", "pyfiles/m.py"});
  upload({"jars/j.jar"});
  CHECK(files_in(spool->dir()) == 2);
  upload({"jars/j.jar"});  // supersedes the second call whole
  CHECK(files_in(spool->dir()) == 2);
  upload({"cache/a"});
  upload({"pyfiles/m.py"});  // now the first call defines nothing left: it goes
  CHECK(files_in(spool->dir()) == 3);
  CHECK(store.snapshot("k").entries.size() == 3);
  store.forget("k");
  CHECK(files_in(spool->dir()) == 0);
  CHECK(spool->bytes() == 0);
}
