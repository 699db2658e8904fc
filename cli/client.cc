#include "cli/client.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "ferry/v1/ferry.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ferry::cli {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& address) {
  const std::string msg = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return absl::ResourceExhaustedError(msg);
    case grpc::StatusCode::UNAVAILABLE: return absl::UnavailableError(absl::StrCat(address, ": ", msg));
    case grpc::StatusCode::DEADLINE_EXCEEDED: return absl::DeadlineExceededError(msg);
    case grpc::StatusCode::ALREADY_EXISTS: return absl::AlreadyExistsError(msg);
    case grpc::StatusCode::CANCELLED: return absl::CancelledError(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: return absl::FailedPreconditionError(msg);
    case grpc::StatusCode::NOT_FOUND: return absl::NotFoundError(msg);
    default: return absl::InternalError(absl::StrCat("gRPC status ", s.error_code(), ": ", msg));
  }
}

// One channel (so one connection) per address for the request calls: a client-chosen request id is
// scoped to the connection that sent it, so Abort must come the way Generate went. Never freed
// (channels must not be destroyed after gRPC's own statics at exit).
std::shared_ptr<grpc::Channel> RequestChannel(const std::string& address) {
  static std::mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& channel = (*channels)[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

}  // namespace

absl::StatusOr<bool> CheckServing(const std::string& address, std::chrono::milliseconds timeout,
                                  const std::string& service) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, address);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<ferry::v1::Finished> GenerateRemote(const std::string& address, const ferry::v1::GenerateRequest& req,
                                                   std::chrono::milliseconds deadline,
                                                   const std::function<void(const ferry::v1::TokenChunk&)>& on_chunk) {
  auto stub = ferry::v1::Ferry::NewStub(RequestChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = stub->Generate(&ctx, req);
  ferry::v1::GenerateResponse resp;
  ferry::v1::Finished finished;
  bool got_finished = false;
  while (reader->Read(&resp)) {
    if (resp.has_chunk()) {
      on_chunk(resp.chunk());
    } else if (resp.has_finished()) {
      finished = resp.finished();
      got_finished = true;
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return FromGrpc(st, address);
  if (!got_finished) return absl::InternalError("the stream ended without a finished message");
  return finished;
}

absl::StatusOr<ferry::v1::ServerInfo> GetServerInfo(const std::string& address, std::chrono::milliseconds deadline) {
  auto stub = ferry::v1::Ferry::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  ferry::v1::ServerInfo info;
  grpc::Status st = stub->GetServerInfo(&ctx, ferry::v1::GetServerInfoRequest(), &info);
  if (!st.ok()) return FromGrpc(st, address);
  return info;
}

absl::StatusOr<bool> AbortRemote(const std::string& address, const std::string& request_id) {
  auto stub = ferry::v1::Ferry::NewStub(RequestChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ferry::v1::AbortRequest req;
  req.set_request_id(request_id);
  ferry::v1::AbortResponse resp;
  grpc::Status st = stub->Abort(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, address);
  return resp.found();
}

}  // namespace ferry::cli
