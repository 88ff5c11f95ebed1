#include "config/file_watch.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using scg::config::file_watch;

namespace {

/// A directory laid out as the kubelet lays out a ConfigMap volume:
/// DIR/..2026_N/config.yaml, DIR/..data -> ..2026_N, DIR/config.yaml -> ..data/config.yaml.
struct configmap_dir {
  std::string dir;
  int version = 0;
  configmap_dir() {
    char tmpl[] = "/tmp/scg-watch-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
  }
  ~configmap_dir() { std::system(("rm -rf '" + dir + "'").c_str()); }
  /// Publishes `text` as the kubelet does: a new timestamped directory, a
  /// new symlink renamed over ..data (atomic), the old directory removed.
  void publish(const std::string& text) {
    const std::string old = "..2026_" + std::to_string(version);
    const std::string next = "..2026_" + std::to_string(++version);
    REQUIRE(::mkdir((dir + "/" + next).c_str(), 0755) == 0);
    std::ofstream(dir + "/" + next + "/config.yaml") << text;
    REQUIRE(::symlink(next.c_str(), (dir + "/..data_tmp").c_str()) == 0);
    REQUIRE(std::rename((dir + "/..data_tmp").c_str(), (dir + "/..data").c_str()) == 0);
    if (version == 1)
      REQUIRE(::symlink("..data/config.yaml", (dir + "/config.yaml").c_str()) == 0);
    else
      std::system(("rm -rf '" + dir + "/" + old + "'").c_str());
  }
  std::string path() const { return dir + "/config.yaml"; }
};

}  // namespace

TEST_CASE("the watch sees a ConfigMap update made by swapping the ..data symlink", "[reload]") {
  configmap_dir cm;
  cm.publish("backends: [\"a:1\"]\n");
  file_watch w{cm.path()};
  CHECK_FALSE(w.changed());
  cm.publish("backends: [\"a:1\", \"b:1\"]\n");
  CHECK(w.changed());
  CHECK_FALSE(w.changed());  // reported once
}

TEST_CASE("the watch reports new bytes once, not a swap to the same bytes", "[reload]") {
  configmap_dir cm;
  cm.publish("one\n");
  file_watch w{cm.path()};
  cm.publish("one\n");  // a new directory and inode, the same contents
  CHECK_FALSE(w.changed());
  cm.publish("bad: [\n");
  CHECK(w.changed());
  cm.publish("bad: [\n");
  CHECK_FALSE(w.changed());  // a rejected file is not reported again
}

TEST_CASE("the watch sees a file rewritten in place, and waits out a missing one", "[reload]") {
  configmap_dir cm;
  const auto path = cm.dir + "/plain.yaml";
  std::ofstream(path) << "x: 1\n";
  file_watch w{path};
  std::ofstream(path) << "x: 22\n";  // another size
  CHECK(w.changed());
  std::remove(path.c_str());
  CHECK_FALSE(w.changed());  // gone for a moment: not a change
  std::ofstream(path) << "x: 333\n";
  CHECK(w.changed());
  std::ofstream(path) << "x: 444\n";
  w.rebase();  // a SIGHUP read it
  CHECK_FALSE(w.changed());
}
