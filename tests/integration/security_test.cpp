// Security at the front door: TLS and mutual TLS with certificates the test
// makes itself; authentication, tenants and limits.
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/integration/harness.hpp"

namespace sc = spark::connect;
using namespace scg::test;

namespace {

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made
/// with the openssl command line in `dir`.
struct test_pki {
  explicit test_pki(const temp_dir& dir) : d(dir.path()) {
    const std::string subj = " -subj /CN=";
    ok = sh("cd " + d + " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2"
            " -keyout ca.key -out ca.pem" + subj + "scg-test-ca") &&
         sign("server", "subjectAltName=IP:127.0.0.1") && sign("client", "extendedKeyUsage=clientAuth") &&
         sh("cd " + d + " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2"
            " -keyout other-ca.key -out other-ca.pem" + subj + "other-ca") &&
         sh("cd " + d + " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout rogue.key"
            " -out rogue.csr" + subj + "rogue && openssl x509 -req -in rogue.csr -CA other-ca.pem -CAkey other-ca.key"
            " -CAcreateserial -days 2 -out rogue.pem");
  }
  bool sign(const std::string& name, const std::string& ext) {
    return sh("cd " + d + " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + name +
              ".key -out " + name + ".csr -subj /CN=" + name + " && printf '" + ext + "\\n' > " + name +
              ".ext && openssl x509 -req -in " + name + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
              " -extfile " + name + ".ext -out " + name + ".pem");
  }
  std::string file(const std::string& name) const { return d + "/" + name; }
  std::string d;
  bool ok = false;
};

/// One Config over TLS trusting `ca`, presenting `cert`/`key` when given.
grpc::Status tls_config(int port, const std::string& ca, const std::string& cert = "", const std::string& key = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = slurp(ca);
  if (!cert.empty()) {
    o.pem_cert_chain = slurp(cert);
    o.pem_private_key = slurp(key);
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(o));
  auto stub = sc::SparkConnectService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  sc::ConfigRequest req;
  req.set_session_id("tls-session");
  *req.mutable_user_context() = user("tess");
  sc::ConfigResponse resp;
  return stub->Config(&ctx, req, &resp);
}

}  // namespace

TEST_CASE("the front door speaks TLS, and mutual TLS with a client CA", "[integration][security]") {
  temp_dir dir;
  test_pki pki(dir);
  REQUIRE(pki.ok);
  auto backend = start_fake(dir, "fake-tls");

  auto tls = start_gateway(dir,
                           gateway_yaml({&backend}, "tls: { cert_file: \"" + pki.file("server.pem") +
                                                        "\", key_file: \"" + pki.file("server.key") + "\" }\n"),
                           "tls");
  CHECK(tls_config(tls.grpc_port, pki.file("ca.pem")).ok());
  grpc::Status plain;
  backend_for_session(tls.grpc_port, "plain", "tess", &plain);
  CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);  // a plaintext client gets no answer
  CHECK_FALSE(tls_config(tls.grpc_port, pki.file("other-ca.pem")).ok());  // nor one that trusts another CA

  auto mtls = start_gateway(dir,
                            gateway_yaml({&backend}, "tls: { cert_file: \"" + pki.file("server.pem") +
                                                         "\", key_file: \"" + pki.file("server.key") +
                                                         "\", client_ca_file: \"" + pki.file("ca.pem") + "\" }\n"),
                            "mtls");
  CHECK(tls_config(mtls.grpc_port, pki.file("ca.pem"), pki.file("client.pem"), pki.file("client.key")).ok());
  CHECK_FALSE(tls_config(mtls.grpc_port, pki.file("ca.pem")).ok());  // no client certificate
  CHECK_FALSE(tls_config(mtls.grpc_port, pki.file("ca.pem"), pki.file("rogue.pem"), pki.file("rogue.key")).ok());
}
