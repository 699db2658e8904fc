// The public API (ferry.v1.Ferry): validation with clear errors, submission to the scheduler,
// and the streaming of each request's tokens back to its client.
//
// Every method is a raw callback method: it receives the request's bytes and parses them itself,
// so bytes that are not a valid message get INVALID_ARGUMENT naming the message and the size
// (gRPC's own parsing answers INTERNAL with no message). A Generate call runs on a thread of its
// own (as the synchronous server gave it one), writing through the reactor.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "coordinator/control_service.h"
#include "coordinator/scheduler.h"
#include "ferry/v1/ferry.grpc.pb.h"
#include "model/checkpoint/config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ferry::coordinator {

using RawApi = ferry::v1::Ferry::WithRawCallbackMethod_Generate<ferry::v1::Ferry::WithRawCallbackMethod_Abort<
    ferry::v1::Ferry::WithRawCallbackMethod_GetModelInfo<
        ferry::v1::Ferry::WithRawCallbackMethod_GetServerInfo<ferry::v1::Ferry::Service>>>>;

class ApiService final : public RawApi {
 public:
  // `accepting` (owned by the caller) is true while requests may be queued: every rank ready,
  // the scheduler running, the group not failed.
  // `tokenizer`: the model's (owned by the caller), or null: requests carry ids only.
  ApiService(const model::ModelConfig& config, std::string model_path, Scheduler* scheduler,
             const ControlService* control, const std::atomic<bool>* accepting,
             const text::Tokenizer* tokenizer = nullptr);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;

  // One Generate call after parsing: `cancelled` says whether the client went away, `write`
  // sends a response (false: the client cannot take it). Runs until the request ends.
  // The model's chat template (owned by the caller), for requests that carry a conversation.
  void SetChatTemplate(const text::ChatTemplate* chat_template) { chat_template_ = chat_template; }

  grpc::Status RunGenerate(const ferry::v1::GenerateRequest& req, const std::string& peer,
                           const std::function<bool()>& cancelled,
                           const std::function<bool(const ferry::v1::GenerateResponse&)>& write);

 private:
  void AbortImpl(const ferry::v1::AbortRequest& req, const std::string& peer, ferry::v1::AbortResponse* resp);
  void ModelInfoImpl(ferry::v1::ModelInfo* resp);
  void ServerInfoImpl(ferry::v1::ServerInfo* resp);

  const model::ModelConfig& config_;
  const std::string model_path_;
  Scheduler* scheduler_;
  const ControlService* control_;
  const std::atomic<bool>* accepting_;
  const text::Tokenizer* tokenizer_;
  const text::ChatTemplate* chat_template_ = nullptr;
};

// Checks a request against the model and the server's limits and builds the scheduler's
// Request. Errors are INVALID_ARGUMENT with the numbers the client needs.
absl::StatusOr<std::shared_ptr<Request>> BuildRequest(const ferry::v1::GenerateRequest& req,
                                                      const model::ModelConfig& config, int64_t max_context);

}  // namespace ferry::coordinator
