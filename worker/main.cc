// ferry-worker: one rank of a Ferry deployment. Registers with the coordinator, joins the data
// plane, loads its tensor-parallel shard and executes steps until told to shut down.
// Exit codes: 0 after a Shutdown, 1 when the coordinator goes away or a step cannot run,
// 2 for bad flags or a model that cannot load.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/args.h"
#include "common/log.h"
#include "dataplane/collectives.h"
#include "dataplane/ucx_dataplane.h"
#include "ferry/v1/control.grpc.pb.h"
#include "model/causal_lm.h"
#include "worker/step_executor.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC address (host:port)");
ABSL_FLAG(int32_t, rank, 0, "This worker's rank");
ABSL_FLAG(int32_t, world, 1, "Ranks in the group (the coordinator's --ranks)");
ABSL_FLAG(int32_t, connect_timeout_s, 60, "Seconds to wait for the coordinator and the peers (seconds)");
ABSL_FLAG(bool, verbose, false, "Log debug lines to stderr");

namespace {

namespace cpb = ferry::control::v1;

// The model's tensor-parallel reductions over the data plane, counting the bytes sent.
class DataPlaneCollective final : public ferry::model::Collective {
 public:
  explicit DataPlaneCollective(ferry::dataplane::DataPlane* dp) : dp_(dp) {}
  absl::Status AllReduceSum(float* data, int64_t n) override {
    // Each rank sends its buffer to each peer (see dataplane/collectives.h).
    bytes_ += static_cast<int64_t>(n) * static_cast<int64_t>(sizeof(float)) * (dp_->world() - 1);
    return ferry::dataplane::AllReduceSum(*dp_, data, static_cast<size_t>(n), kTag);
  }
  int64_t TakeBytes() { return std::exchange(bytes_, 0); }

 private:
  static constexpr uint64_t kTag = 1;
  ferry::dataplane::DataPlane* dp_;
  int64_t bytes_ = 0;
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
  const auto timeout = std::chrono::seconds(absl::GetFlag(FLAGS_connect_timeout_s));

  // Data plane first: its address travels with the registration.
  auto dp = dataplane::UcxDataPlane::Create(rank, world);
  if (!dp.ok()) {
    FERRY_LOG(ERROR) << "rank " << rank << ": data plane: " << dp.status().message();
    return 2;
  }
  grpc::ChannelArguments chan_args;
  chan_args.SetMaxReceiveMessageSize(256 << 20);
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
  cpb::RegisterResponse conf;
  {
    grpc::ClientContext ctx;
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
    if (absl::Status st = (*dp)->Connect(addrs, timeout); !st.ok()) {
      FERRY_LOG(ERROR) << "rank " << rank << ": data plane: " << st.message();
      return 1;
    }
  }
  DataPlaneCollective collective(dp->get());
  auto model = model::LoadCausalLM(conf.model_path(), model::TensorParallel{rank, world, &collective});
  if (!model.ok()) {
    FERRY_LOG(ERROR) << "rank " << rank << ": " << model.status().message();
    return 2;
  }
  worker::StepExecutor exec(std::move(*model), rank);

  grpc::ClientContext ctx;
  auto stream = stub->Steps(&ctx);
  cpb::WorkerMessage hello;
  hello.mutable_ready()->set_rank(rank);
  if (!stream->Write(hello)) {
    FERRY_LOG(ERROR) << "rank " << rank << ": the coordinator closed the step stream";
    return 1;
  }
  FERRY_LOG(INFO) << "rank " << rank << " of " << world << " ready (" << (*dp)->capabilities().transport << ")";
  cpb::CoordinatorMessage msg;
  while (stream->Read(&msg)) {
    if (msg.has_shutdown()) {
      FERRY_LOG(INFO) << "rank " << rank << ": shutdown (" << msg.shutdown().reason() << ")";
      stream->WritesDone();
      return 0;
    }
    const cpb::StepCommand& cmd = msg.step();
    worker::Step step;
    step.step_id = cmd.step_id();
    step.release.assign(cmd.release().begin(), cmd.release().end());
    for (const cpb::Segment& s : cmd.segments()) {
      worker::StepSegment seg;
      seg.seq_id = s.seq_id();
      seg.start = s.start();
      seg.tokens.assign(s.tokens().begin(), s.tokens().end());
      seg.sample = s.sample();
      seg.sampling.temperature = s.temperature();
      seg.sampling.top_k = s.top_k();
      seg.sampling.top_p = s.top_p();
      seg.seed = s.seed();
      step.segments.push_back(std::move(seg));
    }
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> tokens = exec.Execute(step);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpb::WorkerMessage out;
    cpb::StepResult* res = out.mutable_result();
    res->set_step_id(step.step_id);
    res->set_rank(rank);
    res->set_step_seconds(secs);
    res->set_dataplane_bytes(collective.TakeBytes());
    if (tokens.ok()) {
      for (int32_t t : *tokens) res->add_tokens(t);
    } else {
      res->set_error(std::string(tokens.status().message()));
      FERRY_LOG(ERROR) << "rank " << rank << ": step " << step.step_id << ": " << tokens.status().message();
    }
    if (!stream->Write(out)) break;
    // A failed collective leaves the group out of step: stop rather than run on.
    if (!tokens.ok() && tokens.status().code() != absl::StatusCode::kInvalidArgument) return 1;
  }
  grpc::Status st = stream->Finish();
  FERRY_LOG(ERROR) << "rank " << rank << ": the coordinator went away (" << st.error_message() << ")";
  return 1;
}
