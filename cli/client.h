// gRPC client helpers of the `ferry` CLI: health checks and generation against a coordinator.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/v1/ferry.pb.h"

namespace ferry::cli {

// The coordinator's overall health: SERVING (true), NOT_SERVING (false); an error when it
// cannot be reached within `timeout`.
absl::StatusOr<bool> CheckServing(const std::string& address, std::chrono::milliseconds timeout,
                                  const std::string& service = "");

// Runs one Generate call; `on_chunk` gets each streamed chunk (tokens, log-probabilities). Returns the final
// message. gRPC errors come back as absl::Status with the server's message. Generate and Abort
// share one connection per address (a client-chosen request id is scoped to its connection).
absl::StatusOr<ferry::v1::Finished> GenerateRemote(const std::string& address, const ferry::v1::GenerateRequest& req,
                                                   std::chrono::milliseconds deadline,
                                                   const std::function<void(const ferry::v1::TokenChunk&)>& on_chunk);

absl::StatusOr<ferry::v1::ServerInfo> GetServerInfo(const std::string& address,
                                                  std::chrono::milliseconds deadline = std::chrono::seconds(10));
// True when a live request had that id and this client may abort it (a server-assigned id, or
// a client-chosen one sent over this process's connection).
absl::StatusOr<bool> AbortRemote(const std::string& address, const std::string& request_id);

}  // namespace ferry::cli
