// The coordinator's Prometheus metrics, with the names and buckets vLLM users already scrape,
// under the prefix `ferry:`. Declared in one place (metrics.cc, ALL_METRICS) and exposed over
// HTTP at /metrics.
//
// Derived values:
//   kv_cache_usage_perc = used pool pages / pool pages, with a coordinator-managed page pool;
//                         without one, tokens held by running requests / (max_running *
//                         max_context) (the token capacity of the lanes)
#pragma once

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "common/metrics_server.h"
#include "coordinator/scheduler.h"

namespace ferry::coordinator {

class Metrics final : public SchedulerObserver {
 public:
  // `world` ranks get per-rank series; every series is labelled model_name=`model_name`.
  Metrics(int world, const std::string& model_name);

  // Serves /metrics on host:port (common/metrics_server.h: many scrapes at once, each connection
  // bounded in time). Errors: UNAVAILABLE when the port is taken, INVALID_ARGUMENT for a bad host.
  absl::Status Expose(const std::string& host, int port);
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // SchedulerObserver
  void OnStep(int64_t tokens, int64_t running, int64_t waiting, double seconds, double kv_usage) override;
  void OnSchedulerTime(double seconds) override;
  void OnPreempt(const Request& r) override;
  void OnPrefixLookup(int64_t queried, int64_t hit) override;
  void OnFirstToken(const Request& r, double ttft_seconds) override;
  void OnToken(const Request& r, double inter_token_seconds) override;
  void OnScheduled(const Request& r, double queue_seconds) override;
  void OnFinish(const Request& r, FinishReason reason, double e2e_seconds) override;
  void OnLatentBooks(const std::vector<int64_t>& used, const LatentSplitCounts& counts) override;

  // Per-rank step time and data-plane bytes, as each worker reports them.
  void OnRankStep(int rank, double seconds, int64_t dataplane_bytes);
  void OnQueueChange(int64_t waiting);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsServer> server_;

  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Histogram* scheduler_time_;
  prometheus::Histogram *prefill_time_, *decode_time_, *prompt_hist_, *generation_hist_;
  std::vector<prometheus::Histogram*> rank_step_;
  std::vector<prometheus::Counter*> rank_bytes_;
  std::vector<prometheus::Gauge*> latent_used_;
  prometheus::Counter* borrows_ended_;
  prometheus::Counter* borrows_cut_;
  prometheus::Counter* remote_fills_;
  prometheus::Counter* borrowed_pages_;
  prometheus::Counter* carries_;
  prometheus::Counter* carried_tokens_;
  prometheus::Counter* recomputed_;
};

}  // namespace ferry::coordinator
