// One call's span (net/call_span.hpp): its ids at the start, its attributes
// and status at the end.
#include "net/call_span.hpp"

#include "net/span_exporter.hpp"

namespace scg::net {

void call_span::start(std::optional<std::string_view> traceparent) {
  start_ns_ = core::unix_now_ns();
  std::optional<core::trace_parent> inbound;
  if (traceparent) inbound = core::parse_traceparent(*traceparent);
  trace_ = inbound ? *inbound : core::trace_parent{core::new_trace_id(), {}, 1};
  if (inbound) parent_span_ = inbound->span;
  trace_->span = core::new_span_id();
}

void call_span::end(span_exporter& exporter, const std::string& method, const std::string* backend,
                    const std::string& tenant, const std::string& request_id, int grpc_code) {
  core::span s;
  s.trace = trace_->trace;
  s.id = trace_->span;
  s.parent = parent_span_;
  s.name = method;
  s.start_unix_ns = start_ns_;
  s.end_unix_ns = core::unix_now_ns();
  // "/spark.connect.SparkConnectService/ExecutePlan": service, then method.
  const std::string_view path = s.name;
  const auto slash = path.rfind('/');
  const bool split = slash != std::string_view::npos && slash > 0;
  const auto service = split ? path.substr(1, slash - 1) : std::string_view();
  const auto name = split ? path.substr(slash + 1) : path;
  s.attributes = {{"rpc.system", "grpc"}, {"rpc.service", std::string(service)}, {"rpc.method", std::string(name)}};
  if (backend) s.attributes.emplace_back("scg.backend", *backend);
  if (!tenant.empty()) s.attributes.emplace_back("scg.tenant", tenant);
  s.attributes.emplace_back("scg.request_id", request_id);
  s.grpc_status_code = grpc_code;
  s.error = grpc_code != 0;
  exporter.submit(std::move(s));
}

}  // namespace scg::net
