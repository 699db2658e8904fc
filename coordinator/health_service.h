// The standard gRPC health service (grpc.health.v1.Health) of the public API, NOT_SERVING from
// the first moment the port accepts connections. gRPC's built-in service answers SERVING for the
// server as a whole ("") from the instant the server starts, before the coordinator could mark it
// otherwise: a probe in that window (a load balancer's, `ferry serve` waiting for readiness) saw a
// coordinator with no workers as serving.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"

namespace ferry::coordinator {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  // The services it answers for besides "" (the server as a whole); every one NOT_SERVING.
  explicit HealthService(const std::vector<std::string>& services);

  // Moves "" and every named service to SERVING or NOT_SERVING; Watch streams see it at once.
  void SetServing(bool serving);
  // Ends every Watch stream (call before the server's Shutdown, which waits for open calls).
  void Shutdown();

  // The status of the service asked for; NOT_FOUND for a service it does not know.
  grpc::Status Check(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override;
  // The status now, then each change, until the caller cancels or Shutdown(); SERVICE_UNKNOWN
  // for a service it does not know (the protocol's answer; the stream stays open).
  grpc::Status Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const;

  const std::set<std::string> services_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool serving_ = false;
  bool shutdown_ = false;
  uint64_t version_ = 0;  // counts SetServing calls that changed the status
};

}  // namespace ferry::coordinator
