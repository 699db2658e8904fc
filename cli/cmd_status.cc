// `ferry status --server HOST:PORT [--wait-s N]`: whether a server is serving, and what each
// rank is doing (the launcher's `up` and `status` use it).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace ferry::cli {
namespace {

void PrintInfo(const ferry::v1::ServerInfo& info) {
  printf("version: %s\n", info.version().c_str());
  printf("requests: %d running, %d waiting (queue %d); %lld steps\n", info.running_requests(),
         info.waiting_requests(), info.max_queue(), static_cast<long long>(info.steps()));
  printf("kv: %s layout, %lld of %lld pages in use (%d tokens a page); owner split %s\n", info.kv_layout().c_str(),
         static_cast<long long>(info.kv_used_pages()), static_cast<long long>(info.kv_pages()), info.page_size(),
         info.owner_split() ? "on" : "off");
  for (const ferry::v1::RankInfo& r : info.ranks()) {
    printf("rank %d: %s, pid %lld, last step %.3f s", r.rank(), r.state().c_str(), static_cast<long long>(r.pid()),
           r.last_step_seconds());
    if (!r.death().empty()) printf(": %s", r.death().c_str());
    printf("\n");
  }
  if (!info.failure().empty()) printf("failure: %s\n", info.failure().c_str());
}

}  // namespace

// 0: serving; 1: the server answers but is not serving (starting, or failed: it says why);
// 2: no answer (or bad usage).
int RunStatus() {
  const std::string address = absl::GetFlag(FLAGS_server);
  if (address.empty()) {
    fprintf(stderr, "ferry status: --server HOST:PORT is required\n");
    return 2;
  }
  const double wait_s = absl::GetFlag(FLAGS_wait_s);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  absl::StatusOr<bool> serving = false;
  // Until serving, failed, or --wait-s is over (one look when 0).
  for (;;) {
    serving = CheckServing(address, std::chrono::seconds(5));
    if (serving.ok() && *serving) break;
    if (serving.ok()) {
      auto info = GetServerInfo(address, std::chrono::seconds(5));
      if (info.ok() && !info->failure().empty()) break;  // it will not come up
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!serving.ok()) {
    printf("%s: no answer: %s\n", address.c_str(), std::string(serving.status().message()).c_str());
    return 2;
  }
  printf("%s: %s\n", address.c_str(), *serving ? "serving" : "not serving");
  auto info = GetServerInfo(address, std::chrono::seconds(5));
  if (info.ok()) {
    PrintInfo(*info);
  } else {
    printf("server info: %s\n", std::string(info.status().message()).c_str());
  }
  return *serving ? 0 : 1;
}

}  // namespace ferry::cli
