// ferry-worker: one rank of a Ferry deployment. Registers with the coordinator, joins the data
// plane, loads its tensor-parallel shard and executes steps until told to shut down.
// Exit codes: 0 after a Shutdown, 1 when the coordinator goes away or a step cannot run,
// 2 for bad flags or a model that cannot load.
#include <optional>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/args.h"
#include "common/cluster_token.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "common/status.h"
#include "dataplane/dataplane.h"
#include "dataplane/group_collective.h"
#include "dataplane/ucx_dataplane.h"
#include "ferry/v1/control.grpc.pb.h"
#include "model/families/causal_lm.h"
#ifdef FERRY_WITH_CUDA
#include "kernels/cuda/ops.h"
#include "dataplane/nccl_collective.h"
#include "model/cuda/load_cuda.h"
#endif
#include "worker/exit_status.h"
#include "worker/options.h"
#include "worker/step_executor.h"
#include "step/step_proto.h"

// The rank-independent options (worker/options.h) and those every serving process takes
// (common/options.h) come from their tables; these are a worker's own.
FERRY_WORKER_OPTIONS(FERRY_DEFINE_OPTION)
FERRY_PROCESS_OPTIONS(FERRY_DEFINE_OPTION)
ABSL_FLAG(std::string, coordinator, "127.0.0.1:50052",
          "The coordinator's control service (host:port: its --host and --control-port)");
ABSL_FLAG(int32_t, rank, 0, "This worker's rank");
ABSL_FLAG(int32_t, world, 1, "Ranks in the group (the coordinator's --ranks)");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token (mode 0600); empty: FERRY_CLUSTER_TOKEN, or none");
ABSL_FLAG(int32_t, gpu, -1, "--device cuda: the GPU this rank runs on (-1: rank modulo the visible GPUs)");
ABSL_FLAG(int32_t, gpu_share, 0,
          "--device cuda: ranks of the group on this rank's GPU, which split its free memory (0: as rank modulo the "
          "visible GPUs places them)");
ABSL_FLAG(int32_t, metrics_port, 0, "HTTP port of this worker's /metrics (0: none)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Address the worker's /metrics binds to");

namespace cpb = ferry::control::v1;

namespace {

// This rank's model on --device (cpu, or cuda on --gpu, default rank modulo the visible GPUs),
// its tensor-parallel shard; *gpu_share gets the ranks that share its GPU. On GPUs the ranks reduce
// over NCCL when --dataplane gives it (*device_comm, which then replaces tp.comm), else over
// tp.comm staged through host memory; *plane names the one chosen. Errors name the flag.
absl::StatusOr<std::unique_ptr<ferry::model::CausalLM>> LoadRankModel(
    const std::string& path, ferry::model::TensorParallel tp, const ferry::model::CacheOptions& cache,
    std::chrono::milliseconds step_timeout, int* gpu_share, std::unique_ptr<ferry::model::Collective>* device_comm,
    std::string* plane) {
  using namespace ferry;
  const std::string device = absl::GetFlag(FLAGS_device), precision = absl::GetFlag(FLAGS_precision);
  const std::string wanted = absl::GetFlag(FLAGS_dataplane);
  FERRY_RETURN_IF_ERROR(CheckDataPlane(wanted, device));
  absl::StatusOr<model::Nvfp4Numerics> nvfp4 = model::ParseNvfp4Numerics(absl::GetFlag(FLAGS_nvfp4_numerics));
  if (!nvfp4.ok()) return absl::InvalidArgumentError(absl::StrCat("--nvfp4_numerics: ", nvfp4.status().message()));
  if (device == "cpu") return model::LoadCausalLM(path, tp, cache, *nvfp4);
  if (device != "cuda") return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": use cpu or cuda"));
#ifdef FERRY_WITH_CUDA
  if (precision != "bf16" && precision != "f32") {
    return absl::InvalidArgumentError(absl::StrCat("--precision ", precision, ": use bf16 or f32"));
  }
  const int gpus = kernels::cuda::DeviceCount();
  if (gpus == 0) return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
  const int rank = tp.rank, world = tp.world;
  const int gpu = absl::GetFlag(FLAGS_gpu) >= 0 ? absl::GetFlag(FLAGS_gpu) : rank % gpus;
  *gpu_share = absl::GetFlag(FLAGS_gpu_share);
  if (*gpu_share <= 0) *gpu_share = world / gpus + (rank % gpus < world % gpus ? 1 : 0);
  if (absl::Status st = kernels::cuda::UseDevice(gpu); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--gpu ", gpu, ": ", st.message()));
  }
  FERRY_ASSIGN_OR_RETURN(*plane, dataplane::ResolveDeviceDataPlane(wanted, tp.comm, rank, world));
  FERRY_ASSIGN_OR_RETURN(*device_comm, dataplane::DeviceCollective(*plane, tp.comm, rank, world, step_timeout));
  if (*device_comm) tp.comm = device_comm->get();
  model::cuda::CudaLoadOptions opts(precision == "f32" ? model::cuda::Precision::kF32 : model::cuda::Precision::kBf16);
  opts.fp8_experts = absl::GetFlag(FLAGS_fp8_experts);
  opts.nvfp4_experts = absl::GetFlag(FLAGS_nvfp4_experts);
  opts.nvfp4_numerics = *nvfp4;
  return model::cuda::LoadCausalLMCuda(path, tp, cache, opts);
#else
  (void)precision;
  (void)gpu_share;
  (void)step_timeout;
  (void)device_comm;
  (void)plane;
  return absl::UnimplementedError("this ferry-worker was built without CUDA (no nvcc at build time)");
#endif
}

// The memory this rank may use, weights included: --memory-gib, else on a GPU its weights and 90%
// of the free memory over the ranks sharing it (the rest left for each step's scratch; on a GPU
// that shares the host's memory, the host's available memory: HostAvailableBytes), else the
// host's available memory over the ranks.
int64_t RankMemory(int64_t weight_bytes, bool cuda, int gpu_share, int world) {
  int64_t memory = static_cast<int64_t>(absl::GetFlag(FLAGS_memory_gib) * static_cast<double>(int64_t{1} << 30));
#ifdef FERRY_WITH_CUDA
  if (memory <= 0 && cuda) {
    if (auto mem = ferry::kernels::cuda::MemoryInfo(); mem.ok()) {
      const int64_t free = mem->integrated ? std::max(mem->free_bytes, ferry::HostAvailableBytes()) : mem->free_bytes;
      memory = weight_bytes + free / 10 * 9 / gpu_share;
    }
  }
#else
  (void)weight_bytes;
  (void)cuda;
  (void)gpu_share;
#endif
  if (memory <= 0) memory = ferry::HostAvailableBytes() / world;
  return memory;
}

// This rank's /metrics series: step time, tokens, bytes, live conversations and state, and what
// the latent split (docs/owner-split.md) shipped to owners and served for peers.
class RankMetrics {
 public:
  RankMetrics(prometheus::Registry& registry, int rank) {
    const prometheus::Labels labels{{"rank", absl::StrCat(rank)}};
    auto counter = [&](const char* name, const char* help) -> prometheus::Counter& {
      return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
    };
    step_time_ = &prometheus::BuildHistogram().Name("ferry_worker:step_time_seconds")
                      .Help("Time this rank spent executing a step").Register(registry)
                      .Add(labels, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0});
    dp_bytes_ = &counter("ferry_worker:dataplane_bytes_total", "Bytes this rank sent over the data plane");
    step_tokens_ = &counter("ferry_worker:step_tokens_total", "Tokens this rank ran through the model");
    live_ = &prometheus::BuildGauge().Name("ferry_worker:live_sequences")
                 .Help("Conversations whose state this rank holds").Register(registry).Add(labels);
    state_bytes_ = &prometheus::BuildGauge().Name("ferry_worker:state_bytes")
                        .Help("Bytes of conversation state this rank holds").Register(registry).Add(labels);
    shipped_ = &counter("ferry_worker:owner_rows_shipped_total",
                        "Row-layers whose queries this rank sent to their owner (latent split)");
    served_ = &counter("ferry_worker:owner_rows_served_total",
                       "Row-layers this rank attended for another rank's heads (latent split)");
    fetched_ = &counter("ferry_worker:owner_rows_fetched_total",
                        "Latent rows this rank fetched from owners for prompt chunks (history fetch)");
    carried_ = &counter("ferry_worker:owner_rows_carried_total",
                        "Token rows of kept conversations carried to this rank, their new owner (all layers)");
    split_bytes_ = &counter("ferry_worker:owner_exchange_bytes_total",
                            "Bytes of queries, attended latents, fetched and carried rows this rank sent (latent split)");
    split_time_ = &prometheus::BuildHistogram().Name("ferry_worker:owner_exchange_seconds")
                       .Help("Time a step spent in the latent split's exchanges on this rank")
                       .Register(registry)
                       .Add(labels, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                                             0.025, 0.05, 0.1, 0.25, 0.5, 1.0});
  }

  // After a step of `seconds` that sent `sent` bytes and ran `tokens` tokens.
  void OnStep(double seconds, int64_t sent, int64_t tokens, const ferry::worker::StepExecutor& exec) {
    step_time_->Observe(seconds);
    if (const ferry::model::OwnerSplitStats now = exec.model().owner_split_stats();
        now.rows_shipped != seen_.rows_shipped || now.rows_served != seen_.rows_served ||
        now.rows_fetched != seen_.rows_fetched || now.floats_sent != seen_.floats_sent) {
      carried_->Increment(static_cast<double>(now.rows_carried - seen_.rows_carried));
      fetched_->Increment(static_cast<double>(now.rows_fetched - seen_.rows_fetched));
      shipped_->Increment(static_cast<double>(now.rows_shipped - seen_.rows_shipped));
      served_->Increment(static_cast<double>(now.rows_served - seen_.rows_served));
      split_bytes_->Increment(static_cast<double>((now.floats_sent - seen_.floats_sent) * sizeof(float)));
      split_time_->Observe(now.exchange_seconds - seen_.exchange_seconds);
      seen_ = now;
    }
    dp_bytes_->Increment(static_cast<double>(sent));
    step_tokens_->Increment(static_cast<double>(tokens));
    live_->Set(static_cast<double>(exec.live_sequences()));
    state_bytes_->Set(static_cast<double>(exec.state_bytes()));
  }

 private:
  prometheus::Histogram *step_time_, *split_time_;
  prometheus::Counter *dp_bytes_, *step_tokens_, *shipped_, *served_, *fetched_, *carried_, *split_bytes_;
  prometheus::Gauge *live_, *state_bytes_;
  ferry::model::OwnerSplitStats seen_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry;
  absl::SetProgramUsageMessage("ferry-worker --coordinator HOST:PORT --rank R --world W");
  std::vector<std::string> args = NormaliseFlagArgs(argc, argv);
  std::vector<char*> cargs = ArgvOf(args);
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (absl::GetFlag(FLAGS_verbose)) SetMinLogLevel(LogLevel::kDebug);
  const int rank = absl::GetFlag(FLAGS_rank), world = absl::GetFlag(FLAGS_world);
  if (world < 1 || rank < 0 || rank >= world) {
    fprintf(stderr, "ferry-worker: need 0 <= --rank < --world, got rank %d of %d\n", rank, world);
    return 2;
  }
  const absl::StatusOr<std::string> token = LoadClusterToken(absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) {
    fprintf(stderr, "ferry-worker: %s\n", std::string(token.status().message()).c_str());
    return 2;
  }
  // Beyond this machine (a coordinator elsewhere, /metrics on another interface) the cluster
  // token is required, as the coordinator requires it there.
  {
    const std::string coord = absl::GetFlag(FLAGS_coordinator);
    const std::string coord_host = coord.substr(0, coord.rfind(':'));
    const std::string metrics_host = absl::GetFlag(FLAGS_metrics_host);
    const bool beyond = !IsLoopbackHost(coord_host) || (absl::GetFlag(FLAGS_metrics_port) > 0 && !IsLoopbackHost(metrics_host));
    if (token->empty() && beyond) {
      fprintf(stderr,
              "ferry-worker: the coordinator (%s) or /metrics (%s) is beyond this machine: give the cluster token "
              "(--token-file, or FERRY_CLUSTER_TOKEN)\n",
              coord.c_str(), metrics_host.c_str());
      return 2;
    }
  }
  if (!(absl::GetFlag(FLAGS_keepalive_s) >= 0.1 && absl::GetFlag(FLAGS_keepalive_s) <= 3600)) {
    fprintf(stderr, "ferry-worker: need --keepalive-s in [0.1, 3600], got %g\n", absl::GetFlag(FLAGS_keepalive_s));
    return 2;
  }
  if (absl::Status st = CheckDataPlane(absl::GetFlag(FLAGS_dataplane), absl::GetFlag(FLAGS_device)); !st.ok()) {
    fprintf(stderr, "ferry-worker: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  const auto timeout = std::chrono::seconds(absl::GetFlag(FLAGS_connect_timeout_s));

  // This rank's /metrics first: its port must be bound before the data plane's listeners take
  // ephemeral ports (a metrics port in that range could otherwise go to one of them). Not
  // prometheus::Exposer: civetweb's threads cannot start in a process linked with cuBLAS
  // (common/metrics_server.h says why).
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsServer> metrics_server;
  if (absl::GetFlag(FLAGS_metrics_port) > 0) {
    auto started = MetricsServer::Start(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port), registry);
    if (started.ok()) {
      metrics_server = std::move(*started);
    } else {
      // Metrics are not worth failing the group for: say so and serve without them.
      FERRY_LOG(WARNING) << "rank " << rank << ": " << started.status().message();
    }
  }

  // Then the data plane: its address travels with the registration.
  auto dp = dataplane::UcxDataPlane::Create(rank, world);
  if (!dp.ok()) {
    FERRY_LOG(ERROR) << "rank " << rank << ": data plane: " << dp.status().message();
    return 2;
  }
  grpc::ChannelArguments chan_args;
  chan_args.SetMaxReceiveMessageSize(256 << 20);
  // Keepalive: a coordinator that stops answering pings within --keepalive-s ends the control
  // stream, and this worker exits (kExitLostCoordinator) instead of waiting forever.
  const int keepalive_ms = static_cast<int>(absl::GetFlag(FLAGS_keepalive_s) * 1000);
  chan_args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  chan_args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  chan_args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  chan_args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_coordinator), grpc::InsecureChannelCredentials(),
                                           chan_args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    FERRY_LOG(ERROR) << "rank " << rank << ": cannot reach the coordinator at " << absl::GetFlag(FLAGS_coordinator);
    return 1;
  }
  auto stub = cpb::Control::NewStub(channel);
  cpb::RegisterRequest reg;
  reg.set_rank(rank);
  reg.set_pid(getpid());
  reg.set_dataplane_address((*dp)->address());
  reg.set_world_size(world);
  cpb::RegisterResponse conf;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("ferry-cluster-token", *token);
    grpc::Status st = stub->Register(&ctx, reg, &conf);
    if (!st.ok()) {
      FERRY_LOG(ERROR) << "rank " << rank << ": registration refused: " << st.error_message();
      return 1;
    }
  }
  if (conf.world_size() != world) {
    FERRY_LOG(ERROR) << "rank " << rank << ": the coordinator serves " << conf.world_size() << " ranks, not " << world;
    return 2;
  }
  if (world > 1) {
    std::vector<std::string> addrs(conf.dataplane_addresses().begin(), conf.dataplane_addresses().end());
    if (absl::Status st = (*dp)->Connect(addrs, timeout, conf.dataplane_nonce()); !st.ok()) {
      FERRY_LOG(ERROR) << "rank " << rank << ": data plane: " << st.message();
      return 1;
    }
  }
  const double step_timeout = absl::GetFlag(FLAGS_step_timeout);
  if (!(step_timeout > 0)) {
    FERRY_LOG(ERROR) << "rank " << rank << ": --step-timeout " << step_timeout << ": need a positive number of seconds";
    return 2;
  }
  const auto step_ms = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(step_timeout * 1000)));
  dataplane::GroupCollective collective(dp->get(), step_ms);
  model::CacheOptions cache;
  if (conf.page_size() > 0) cache.page_size = conf.page_size();
  // The arena grows until the coordinator's plan fixes its size (the Arena message).
  const std::string device = absl::GetFlag(FLAGS_device);
  int gpu_share = 1;  // --device cuda: the ranks on this rank's GPU
  std::unique_ptr<model::Collective> device_comm;  // NCCL's, when the ranks use it
  std::string plane = "ucx";
  absl::StatusOr<std::unique_ptr<model::CausalLM>> model = LoadRankModel(
      conf.model_path(), model::TensorParallel{rank, world, &collective}, cache, step_ms, &gpu_share, &device_comm, &plane);
  if (!model.ok()) {
    FERRY_LOG(ERROR) << "rank " << rank << ": " << model.status().message();
    return 2;
  }
  worker::StepExecutor exec(std::move(*model), rank);

  // This rank's own metrics (the coordinator aggregates the same step times per rank).
  RankMetrics rank_metrics(*registry, rank);

  grpc::ClientContext ctx;
  ctx.AddMetadata("ferry-cluster-token", *token);
  auto stream = stub->Steps(&ctx);
  cpb::WorkerMessage hello;
  hello.mutable_ready()->set_rank(rank);
  // The room for caches: this rank's memory less its weights (the plan's input).
  const int64_t memory = RankMemory(exec.model().weight_bytes(), device == "cuda", gpu_share, world);
  hello.mutable_ready()->set_weight_bytes(exec.model().weight_bytes());
  hello.mutable_ready()->set_room_bytes(std::max<int64_t>(0, memory - exec.model().weight_bytes()));
  hello.mutable_ready()->set_page_bytes(exec.model().page_bytes());
  hello.mutable_ready()->set_fixed_bytes(exec.model().fixed_bytes_per_sequence());
  hello.mutable_ready()->set_latent_page_bytes(exec.model().latent_page_bytes());
  if (!stream->Write(hello)) {
    FERRY_LOG(ERROR) << "rank " << rank << ": the coordinator closed the step stream";
    return 1;
  }
  model::Collective& comm = device_comm ? *device_comm : static_cast<model::Collective&>(collective);
  FERRY_LOG(INFO) << "rank " << rank << " of " << world << " ready ("
                  << (device_comm ? std::string("nccl") : (*dp)->capabilities().transport) << ")";
  cpb::CoordinatorMessage msg;
  while (stream->Read(&msg)) {
    if (msg.has_shutdown()) {
      FERRY_LOG(INFO) << "rank " << rank << ": shutdown (" << msg.shutdown().reason() << ")";
      stream->WritesDone();
      (void)stream->Finish();
      return 0;
    }
    if (msg.has_arena()) {
      cpb::WorkerMessage out;
      out.mutable_result()->set_rank(rank);
      const int64_t latent = msg.arena().latent_pages() > 0 ? msg.arena().latent_pages() : msg.arena().pages();
      absl::Status st = exec.SizeArenas(msg.arena().pages(), latent);
      if (st.ok()) {
        FERRY_LOG(INFO) << "rank " << rank << ": KV arena of " << msg.arena().pages() << " pages ("
                        << msg.arena().pages() * exec.model().page_bytes() << " bytes)";
      } else {
        FERRY_LOG(ERROR) << "rank " << rank << ": KV arena: " << st.message();
        out.mutable_result()->set_error(std::string(st.message()));
      }
      if (!stream->Write(out)) break;
      continue;
    }
    absl::StatusOr<step::Step> decoded = step::StepFromProto(msg.step(), rank, world);
    step::Step step;  // what the step ran (none of it when it could not be decoded)
    step.step_id = msg.step().step_id();
    if (decoded.ok()) step = std::move(*decoded);
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<step::SampledToken>> tokens =
        decoded.ok() ? exec.Execute(step) : absl::StatusOr<std::vector<step::SampledToken>>(decoded.status());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t sent = comm.TakeBytes();
    int64_t ntok = 0;
    for (const step::StepSegment& seg : step.segments) ntok += static_cast<int64_t>(seg.tokens.size());
    rank_metrics.OnStep(secs, sent, ntok, exec);
    cpb::WorkerMessage out;
    cpb::StepResult* res = out.mutable_result();
    res->set_step_id(step.step_id);
    res->set_rank(rank);
    res->set_step_seconds(secs);
    res->set_dataplane_bytes(sent);
    if (tokens.ok()) {
      step::SampledToProto(*tokens, res);
    } else {
      res->set_error(std::string(tokens.status().message()));
      // INVALID_ARGUMENT: refused before any state changed, alike on every rank (StepExecutor).
      res->set_refused(absl::IsInvalidArgument(tokens.status()));
      if (absl::IsDeadlineExceeded(tokens.status())) {
        // The data-plane watchdog: a peer did not take part in the step in time (stopped, hung or
        // partitioned). The group cannot go on; the message and waited_for name the peers.
        for (int peer : dataplane::WaitedFor(tokens.status())) res->add_waited_for(peer);
        FERRY_LOG(ERROR) << "rank " << rank << ": step " << step.step_id << " aborted after --step-timeout "
                         << step_timeout << " s: " << tokens.status().message();
      } else {
        FERRY_LOG(ERROR) << "rank " << rank << ": step " << step.step_id << ": " << tokens.status().message();
      }
    }
    if (!stream->Write(out)) break;
    // A failed collective leaves the group out of step: stop rather than run on, once the answer
    // is on its way (half-close, and wait up to 2 s for the coordinator to take it).
    if (!tokens.ok() && !absl::IsInvalidArgument(tokens.status())) {
      comm.Abandon();  // its teardown must not wait for peers that still wait for this rank
      stream->WritesDone();
      std::atomic<bool> finished{false};
      std::thread cut([&] {
        for (int i = 0; i < 200 && !finished.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!finished.load()) ctx.TryCancel();
      });
      (void)stream->Finish();
      finished = true;
      cut.join();
      return absl::IsDeadlineExceeded(tokens.status()) ? worker::kExitPeerTimeout : 1;
    }
  }
  grpc::Status st = stream->Finish();
  FERRY_LOG(ERROR) << "rank " << rank << ": the coordinator went away (" << st.error_message() << ")";
  comm.Abandon();  // no step follows: tearing the group down must not wait for peers that may be gone
  return worker::kExitLostCoordinator;
}
