#include "coordinator/health_service.h"

#include <chrono>

namespace ferry::coordinator {

using grpc::health::v1::HealthCheckResponse;

HealthService::HealthService(const std::vector<std::string>& services) : services_(services.begin(), services.end()) {}

void HealthService::SetServing(bool serving) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (serving_ == serving) return;
    serving_ = serving;
    ++version_;
  }
  changed_.notify_all();
}

void HealthService::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  changed_.notify_all();
}

HealthCheckResponse::ServingStatus HealthService::StatusOf(const std::string& service) const {
  if (!service.empty() && services_.count(service) == 0) return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* req,
                                  HealthCheckResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  const HealthCheckResponse::ServingStatus status = StatusOf(req->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + req->service() + "'");
  }
  resp->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = version_ + 1;  // differs: the first pass sends the status now
  while (true) {
    if (seen != version_) {
      seen = version_;
      HealthCheckResponse resp;
      resp.set_status(StatusOf(req->service()));
      lock.unlock();
      const bool sent = writer->Write(resp);
      lock.lock();
      if (!sent) break;  // the caller went away
    }
    if (shutdown_ || ctx->IsCancelled()) break;  // after one answer at least
    // Wakes on a change or Shutdown(); the timeout notices a cancelled caller.
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  return grpc::Status::OK;
}

}  // namespace ferry::coordinator
