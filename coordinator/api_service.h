// The public API (ferry.v1.Ferry): validation with clear errors, submission to the scheduler,
// and the streaming of each request's tokens back to its client.
#pragma once

#include <atomic>
#include <string>

#include <grpcpp/grpcpp.h>

#include "coordinator/control_service.h"
#include "coordinator/scheduler.h"
#include "ferry/v1/ferry.grpc.pb.h"
#include "model/config.h"

namespace ferry::coordinator {

class ApiService final : public ferry::v1::Ferry::Service {
 public:
  // `accepting` (owned by the caller) is true while requests may be queued: every rank ready,
  // the scheduler running, the group not failed.
  ApiService(const model::ModelConfig& config, std::string model_path, Scheduler* scheduler,
             const ControlService* control, const std::atomic<bool>* accepting);

  grpc::Status Generate(grpc::ServerContext* ctx, const ferry::v1::GenerateRequest* req,
                        grpc::ServerWriter<ferry::v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* ctx, const ferry::v1::AbortRequest* req,
                     ferry::v1::AbortResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const ferry::v1::GetModelInfoRequest* req,
                            ferry::v1::ModelInfo* resp) override;
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const ferry::v1::GetServerInfoRequest* req,
                             ferry::v1::ServerInfo* resp) override;

 private:
  const model::ModelConfig& config_;
  const std::string model_path_;
  Scheduler* scheduler_;
  const ControlService* control_;
  const std::atomic<bool>* accepting_;
};

// Checks a request against the model and the server's limits and builds the scheduler's
// Request. Errors are INVALID_ARGUMENT with the numbers the client needs.
absl::StatusOr<std::shared_ptr<Request>> BuildRequest(const ferry::v1::GenerateRequest& req,
                                                      const model::ModelConfig& config, int64_t max_context);

}  // namespace ferry::coordinator
