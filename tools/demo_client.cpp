// scg-demo-client: a short scripted Spark Connect conversation through a
// gateway, showing which backend served each session.
//   scg-demo-client HOST:PORT [SESSIONS]
//   scg-demo-client HOST:PORT --session ID [--user USER]
//       one Config for session ID; prints "backend=NAME" (exit 0 when OK)
//   scg-demo-client HOST:PORT --clone PARENT NEW [--user USER]
//       CloneSession of PARENT to NEW; prints "cloned" (exit 0 when OK)
// Session ids are UUIDs, as Spark requires.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "core/ids.hpp"
#include "spark_connect.grpc.pb.h"

namespace sc = spark::connect;

namespace {

std::string server_header(const grpc::ClientContext& ctx, const char* key) {
  for (const auto* md : {&ctx.GetServerInitialMetadata(), &ctx.GetServerTrailingMetadata()}) {
    auto it = md->find(key);
    if (it != md->end()) return std::string(it->second.data(), it->second.size());
  }
  return "?";
}

template <class Request>
Request for_session(const std::string& session, const std::string& user) {
  Request r;
  r.set_session_id(session);
  r.mutable_user_context()->set_user_id(user);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: scg-demo-client HOST:PORT [SESSIONS | --session ID | --clone PARENT NEW] [--user USER]\n";
    return 2;
  }
  auto stub = sc::SparkConnectService::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  if (argc > 4 && std::string(argv[2]) == "--clone") {
    const std::string user = argc > 6 && std::string(argv[5]) == "--user" ? argv[6] : "demo";
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto req = for_session<sc::CloneSessionRequest>(argv[3], user);
    req.set_new_session_id(argv[4]);
    sc::CloneSessionResponse resp;
    auto s = stub->CloneSession(&ctx, req, &resp);
    if (!s.ok()) {
      std::cerr << "error: " << s.error_code() << " " << s.error_message() << "\n";
      return 1;
    }
    std::cout << "cloned\n";
    return 0;
  }
  if (argc > 3 && std::string(argv[2]) == "--session") {
    const std::string user = argc > 5 && std::string(argv[4]) == "--user" ? argv[5] : "demo";
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sc::ConfigResponse cfg;
    auto s = stub->Config(&ctx, for_session<sc::ConfigRequest>(argv[3], user), &cfg);
    if (!s.ok()) {
      std::cerr << "error: " << s.error_code() << " " << s.error_message() << "\n";
      return 1;
    }
    std::cout << "backend=" << server_header(ctx, "x-fake-backend") << "\n";
    return 0;
  }
  const int sessions = argc > 2 ? std::stoi(argv[2]) : 4;
  int failures = 0;
  std::printf("%-36s %-8s %-10s %-10s %-10s %s\n", "session", "user", "Config", "ExecutePlan",
              "Reattach", "rows");
  for (int i = 0; i < sessions; ++i) {
    const std::string session = scg::core::new_uuid();
    const std::string user = i % 2 ? "alice" : "bob";
    // 1. Config creates the session on the backend scg picks.
    grpc::ClientContext c1;
    c1.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sc::ConfigResponse cfg;
    auto s1 = stub->Config(&c1, for_session<sc::ConfigRequest>(session, user), &cfg);
    // 2. A query whose result stream the server cuts after 2 responses...
    grpc::ClientContext c2;
    c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    c2.AddMetadata("x-fake-responses", "5");
    c2.AddMetadata("x-fake-stream-max-responses", "2");
    auto req = for_session<sc::ExecutePlanRequest>(session, user);
    req.set_operation_id(scg::core::new_uuid());
    // Reattachable, as PySpark asks by default: only such an execution is cut and continued.
    req.add_request_options()->mutable_reattach_options()->set_reattachable(true);
    auto reader = stub->ExecutePlan(&c2, req);
    sc::ExecutePlanResponse r;
    std::string last;
    long rows = 0;
    while (reader->Read(&r)) {
      last = r.response_id();
      rows += r.arrow_batch().row_count();
    }
    auto s2 = reader->Finish();
    // 3. ...and the reattaches that continue it, which must reach the same
    //    server, until the result is complete (as Spark clients do).
    grpc::Status s3;
    std::string reattach_backend = "-";
    bool complete = false;
    for (int attempt = 0; attempt < 10 && s2.ok() && s3.ok() && !complete; ++attempt) {
      grpc::ClientContext c3;
      c3.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      auto re = for_session<sc::ReattachExecuteRequest>(session, user);
      re.set_operation_id(req.operation_id());
      re.set_last_response_id(last);
      auto reader3 = stub->ReattachExecute(&c3, re);
      while (reader3->Read(&r)) {
        last = r.response_id();
        rows += r.arrow_batch().row_count();
        complete = complete || r.has_result_complete();
      }
      s3 = reader3->Finish();
      auto b = server_header(c3, "x-fake-backend");
      reattach_backend = attempt == 0 ? b : (b == reattach_backend ? b : reattach_backend + "," + b);
    }
    for (const auto* s : {&s1, &s2, &s3}) {
      if (!s->ok()) {
        ++failures;
        std::cerr << "  error: " << s->error_code() << " " << s->error_message() << "\n";
      }
    }
    std::printf("%-36s %-8s %-10s %-10s %-10s %ld%s\n", session.c_str(), user.c_str(),
                server_header(c1, "x-fake-backend").c_str(), server_header(c2, "x-fake-backend").c_str(),
                reattach_backend.c_str(), rows, complete ? " (complete)" : "");
  }
  if (failures) std::cerr << failures << " call(s) failed\n";
  return failures ? 1 : 0;
}
