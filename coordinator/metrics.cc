#include "coordinator/metrics.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace ferry::coordinator {
namespace {

using prometheus::Histogram;

// vLLM's buckets, so existing dashboards and alerts read these as they read vLLM's; inter-token
// latency adds finer ones below vLLM's 10 ms floor, where these steps take 1-8 ms.
const Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                                   1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const Histogram::BucketBoundaries kItlBuckets = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const Histogram::BucketBoundaries kRequestBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                                      30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// Tokens a request holds (prompt or generated): powers of two as vLLM's request-size histograms.
const Histogram::BucketBoundaries kRequestTokenBuckets = {1,    2,    4,     8,     16,    32,     64,     128,
                                                           256,  512,  1024,  2048,  4096,  8192,   16384,  32768,
                                                           65536, 131072, 262144, 524288, 1048576};
const Histogram::BucketBoundaries kIterationTokenBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
const Histogram::BucketBoundaries kStepBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
const Histogram::BucketBoundaries kSchedulerBuckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
                                                       0.001,   0.0025,   0.005,   0.01,   0.025,   0.1};

}  // namespace

// ALL_METRICS: every family the coordinator exports is built here and nowhere else.
Metrics::Metrics(int world, const std::string& model_name) : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  // Every series carries the served model's name, as vLLM's do.
  const std::map<std::string, std::string> model = {{"model_name", model_name}};
  running_ = &prometheus::BuildGauge().Name("ferry:num_requests_running")
                  .Help("Requests holding a lane (in prefill or decode)").Labels(model).Register(r).Add({});
  waiting_ = &prometheus::BuildGauge().Name("ferry:num_requests_waiting")
                  .Help("Requests waiting in the admission queue").Labels(model).Register(r).Add({});
  kv_usage_ = &prometheus::BuildGauge().Name("ferry:kv_cache_usage_perc")
                   .Help("KV pool use, 1 = full: used pool pages over pool pages (pages the prompt cache keeps "
                         "included); without a page pool, running requests' tokens over the lanes' capacity")
                   .Labels(model).Register(r).Add({});
  prompt_tokens_ = &prometheus::BuildCounter().Name("ferry:prompt_tokens_total")
                        .Help("Prompt tokens of finished requests").Labels(model).Register(r).Add({});
  generation_tokens_ = &prometheus::BuildCounter().Name("ferry:generation_tokens_total")
                            .Help("Tokens generated").Labels(model).Register(r).Add({});
  preemptions_ = &prometheus::BuildCounter().Name("ferry:num_preemptions_total")
                      .Help("Requests preempted for lack of pages (recomputed later)").Labels(model).Register(r).Add({});
  prefix_queries_ = &prometheus::BuildCounter().Name("ferry:prefix_cache_queries_total")
                         .Help("Prompt tokens looked up in the prompt cache").Labels(model).Register(r).Add({});
  prefix_hits_ = &prometheus::BuildCounter().Name("ferry:prefix_cache_hits_total")
                      .Help("Prompt tokens the prompt cache supplied").Labels(model).Register(r).Add({});
  success_ = &prometheus::BuildCounter().Name("ferry:request_success_total")
                  .Help("Finished requests by finish reason").Labels(model).Register(r);
  for (const char* reason : {"stop", "length", "abort", "error"}) success_->Add({{"finished_reason", reason}});
  ttft_ = &prometheus::BuildHistogram().Name("ferry:time_to_first_token_seconds")
               .Help("Arrival to first generated token").Labels(model).Register(r).Add({}, kTtftBuckets);
  itl_ = &prometheus::BuildHistogram().Name("ferry:inter_token_latency_seconds")
              .Help("Time between two generated tokens of a request").Labels(model).Register(r).Add({}, kItlBuckets);
  e2e_ = &prometheus::BuildHistogram().Name("ferry:e2e_request_latency_seconds")
              .Help("Arrival to finish").Labels(model).Register(r).Add({}, kRequestBuckets);
  queue_ = &prometheus::BuildHistogram().Name("ferry:request_queue_time_seconds")
                .Help("Arrival to first scheduled step").Labels(model).Register(r).Add({}, kRequestBuckets);
  prefill_time_ = &prometheus::BuildHistogram().Name("ferry:request_prefill_time_seconds")
                       .Help("First scheduled step to first generated token (the prompt's prefill)")
                       .Labels(model).Register(r).Add({}, kRequestBuckets);
  decode_time_ = &prometheus::BuildHistogram().Name("ferry:request_decode_time_seconds")
                      .Help("First generated token to finish (the decode phase)").Labels(model).Register(r).Add({}, kRequestBuckets);
  prompt_hist_ = &prometheus::BuildHistogram().Name("ferry:request_prompt_tokens")
                      .Help("Prompt tokens of finished requests").Labels(model).Register(r).Add({}, kRequestTokenBuckets);
  generation_hist_ = &prometheus::BuildHistogram().Name("ferry:request_generation_tokens")
                          .Help("Tokens generated by finished requests").Labels(model).Register(r).Add({}, kRequestTokenBuckets);
  iteration_tokens_ = &prometheus::BuildHistogram().Name("ferry:iteration_tokens_total")
                           .Help("Tokens in one step (decode rows + prefill chunks)")
                           .Labels(model).Register(r).Add({}, kIterationTokenBuckets);
  scheduler_time_ = &prometheus::BuildHistogram().Name("ferry:scheduler_step_seconds")
                         .Help("The coordinator's own time in a step: planning it and applying its results "
                               "(the wait for the workers left out)")
                         .Labels(model).Register(r).Add({}, kSchedulerBuckets);
  auto& step_family = prometheus::BuildHistogram().Name("ferry:rank_step_time_seconds")
                          .Help("Time a rank spent executing a step").Labels(model).Register(r);
  auto& bytes_family = prometheus::BuildCounter().Name("ferry:rank_dataplane_bytes_total")
                           .Help("Bytes a rank sent over the data plane").Labels(model).Register(r);
  auto& latent_family = prometheus::BuildGauge().Name("ferry:latent_pages_used")
                            .Help("Latent pages in use in a rank's arena (latent split)").Labels(model).Register(r);
  for (int k = 0; k < world; ++k) {
    rank_step_.push_back(&step_family.Add({{"rank", absl::StrCat(k)}}, kStepBuckets));
    rank_bytes_.push_back(&bytes_family.Add({{"rank", absl::StrCat(k)}}));
    latent_used_.push_back(&latent_family.Add({{"rank", absl::StrCat(k)}}));
  }
  borrows_ended_ = &prometheus::BuildCounter().Name("ferry:latent_borrows_ended_total")
                        .Help("Fills that borrowed latent pages on every rank and gave them back (latent split)")
                        .Labels(model).Register(r).Add({});
  borrows_cut_ = &prometheus::BuildCounter().Name("ferry:latent_borrows_cut_total")
                      .Help("Borrows ended mid-fill because a rank ran out of latent pages (latent split)")
                      .Labels(model).Register(r).Add({});
  remote_fills_ = &prometheus::BuildCounter().Name("ferry:latent_remote_fills_total")
                       .Help("Fills that ran at their owner without borrowing, history fetched (latent split)")
                       .Labels(model).Register(r).Add({});
  borrowed_pages_ = &prometheus::BuildCounter().Name("ferry:latent_borrowed_pages_total")
                         .Help("Latent pages lent to fills on ranks other than their owners (latent split)")
                         .Labels(model).Register(r).Add({});
  carries_ = &prometheus::BuildCounter().Name("ferry:latent_carries_total")
                  .Help("Resumes whose kept latent rows were carried to a new owner (latent split)")
                  .Labels(model).Register(r).Add({});
  carried_tokens_ = &prometheus::BuildCounter().Name("ferry:latent_carried_tokens_total")
                        .Help("Tokens of kept conversations carried to a new owner (latent split)")
                        .Labels(model).Register(r).Add({});
  recomputed_ = &prometheus::BuildCounter().Name("ferry:latent_carry_recomputes_total")
                     .Help("Resumes too short to carry whose owner lacked room, recomputed instead (latent split)")
                     .Labels(model).Register(r).Add({});
}

void Metrics::OnLatentBooks(const std::vector<int64_t>& used, const LatentSplitCounts& counts) {
  for (size_t k = 0; k < used.size() && k < latent_used_.size(); ++k) latent_used_[k]->Set(static_cast<double>(used[k]));
  // The scheduler's totals: each counter moves up to its total.
  auto catch_up = [](prometheus::Counter* c, int64_t total) { c->Increment(static_cast<double>(total) - c->Value()); };
  catch_up(borrows_ended_, counts.borrows_ended);
  catch_up(borrows_cut_, counts.borrows_cut);
  catch_up(remote_fills_, counts.remote_fills);
  catch_up(borrowed_pages_, counts.borrowed_pages);
  catch_up(carries_, counts.carries);
  catch_up(carried_tokens_, counts.carried_tokens);
  catch_up(recomputed_, counts.recomputed);
}

absl::Status Metrics::Expose(const std::string& host, int port) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(host, port, registry_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

void Metrics::OnStep(int64_t tokens, int64_t running, int64_t waiting, double, double kv_usage) {
  if (tokens > 0) iteration_tokens_->Observe(static_cast<double>(tokens));
  running_->Set(static_cast<double>(running));
  waiting_->Set(static_cast<double>(waiting));
  kv_usage_->Set(kv_usage);
}

void Metrics::OnSchedulerTime(double seconds) { scheduler_time_->Observe(seconds); }

void Metrics::OnPreempt(const Request&) { preemptions_->Increment(); }

void Metrics::OnPrefixLookup(int64_t queried, int64_t hit) {
  prefix_queries_->Increment(static_cast<double>(queried));
  prefix_hits_->Increment(static_cast<double>(hit));
}

void Metrics::OnFirstToken(const Request&, double ttft) {
  ttft_->Observe(ttft);
  generation_tokens_->Increment();
}

void Metrics::OnToken(const Request&, double itl) {
  itl_->Observe(itl);
  generation_tokens_->Increment();
}

void Metrics::OnScheduled(const Request&, double queue_seconds) { queue_->Observe(queue_seconds); }

void Metrics::OnFinish(const Request& r, FinishReason reason, double e2e) {
  success_->Add({{"finished_reason", FinishReasonName(reason)}}).Increment();
  prompt_tokens_->Increment(static_cast<double>(r.prompt.size()));
  e2e_->Observe(e2e);
  prompt_hist_->Observe(static_cast<double>(r.prompt.size()));
  generation_hist_->Observe(static_cast<double>(r.generated.size()));
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (r.first_scheduled && r.first_token) prefill_time_->Observe(seconds(*r.first_scheduled, *r.first_token));
  if (r.first_token) decode_time_->Observe(seconds(*r.first_token, Clock::now()));
}

void Metrics::OnRankStep(int rank, double seconds, int64_t bytes) {
  if (rank < 0 || rank >= static_cast<int>(rank_step_.size())) return;
  rank_step_[rank]->Observe(seconds);
  rank_bytes_[rank]->Increment(static_cast<double>(bytes));
}

void Metrics::OnQueueChange(int64_t waiting) { waiting_->Set(static_cast<double>(waiting)); }

}  // namespace ferry::coordinator
