// ferry-bench-split: what tensor parallelism and the latent split move between ranks at a real
// config's widths (random weights, a few of its layers), per decode step: W ranks as processes on
// this machine's GPUs (rank r on GPU r modulo the visible ones; several may share one) joined by
// the UCX data plane (dataplane/process_group.h), each holding its shard. For each batch size the
// conversations are prefilled to --context tokens (borrowed on every rank, as serving fills them),
// then decoded --steps times with the split off (every rank holds every latent row) and on (each
// conversation's rows on rank i mod W). Rank 0 prints one markdown table: step time, the bytes
// each rank sent a step (all of the data plane: the float32 reductions and the split's queries and
// attended latents), the split's share per MLA layer, the reductions' per layer, and the wall time
// the split's exchanges took (staged through host memory: device-to-host copies, the transfer
// and the wait for the peer included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/random_checkpoint.h"
#include "common/status.h"
#include "dataplane/group_collective.h"
#include "dataplane/process_group.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/cuda/glm_moe_dsa_cuda.h"

ABSL_FLAG(std::string, config, "tests/data/configs/glm-5.3-flash.config.json", "A config.json of either family");
ABSL_FLAG(std::string, layers, "0,4,3", "The config's layers the model keeps, in order");
ABSL_FLAG(int32_t, ranks, 2, "Tensor-parallel width W");
ABSL_FLAG(std::string, batches, "1,8", "Decode batch sizes (conversations), comma-separated");
ABSL_FLAG(int64_t, context, 4096, "Tokens each conversation holds before the timed decode steps");
ABSL_FLAG(int64_t, chunk, 512, "Prefill chunk (tokens a step)");
ABSL_FLAG(int32_t, warmup, 3, "Untimed decode steps");
ABSL_FLAG(int32_t, steps, 10, "Timed decode steps");
ABSL_FLAG(int64_t, page_size, 64, "Tokens a KV page");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the weights and tokens");

namespace {

using namespace ferry;

// What one rank measured for one case (per decode step).
struct Measured {
  double step_ms = 0, sent_bytes = 0, split_bytes = 0, exchange_ms = 0;
};
constexpr int kFields = 4;

absl::StatusOr<std::unique_ptr<model::CausalLM>> Load(const bench::RandomCheckpoint& rc, const model::TensorParallel& tp) {
  model::CacheOptions cache;
  cache.page_size = absl::GetFlag(FLAGS_page_size);
  const model::ModelConfig& c = rc.config();
  if (c.family == model::Family::kGlmMoeDsa) {
    FERRY_ASSIGN_OR_RETURN(auto m, model::cuda::GlmMoeDsaCuda::Load(rc.checkpoint(), c, cache, {}, tp));
    return std::unique_ptr<model::CausalLM>(std::move(m));
  }
  FERRY_ASSIGN_OR_RETURN(auto m, model::cuda::Glm5NextCuda::Load(rc.checkpoint(), c, cache, {}, tp));
  return std::unique_ptr<model::CausalLM>(std::move(m));
}

// One case on this rank: `batch` conversations at --context tokens, decoded with the split on or off.
absl::StatusOr<Measured> RunCase(model::CausalLM& m, dataplane::GroupCollective& comm, const model::TensorParallel& tp,
                                 int64_t batch, bool split, std::mt19937_64& rng) {
  const model::ModelConfig& c = m.config();
  const int64_t ctx = absl::GetFlag(FLAGS_context), chunk = absl::GetFlag(FLAGS_chunk);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<std::unique_ptr<model::SequenceState>> seqs;
  for (int64_t i = 0; i < batch; ++i) {
    seqs.push_back(m.NewSequence());
    // Filled on every rank (borrowed), then, with the split, kept on the owner only.
    if (split) FERRY_RETURN_IF_ERROR(seqs.back()->SetLatentOwner(static_cast<int>(i % tp.world), /*borrowed=*/true));
  }
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t at = 0; at < ctx; at += chunk) {
      std::vector<int32_t> t(static_cast<size_t>(std::min(chunk, ctx - at)));
      for (int32_t& x : t) x = token(rng);
      const model::ForwardSegment seg{seqs[static_cast<size_t>(i)].get(), t, false};
      FERRY_RETURN_IF_ERROR(m.Forward(std::span<const model::ForwardSegment>(&seg, 1)).status());
    }
    if (split) FERRY_RETURN_IF_ERROR(seqs[static_cast<size_t>(i)]->SetLatentOwner(static_cast<int>(i % tp.world), false));
  }
  std::vector<int32_t> next(static_cast<size_t>(batch));
  auto step = [&]() -> absl::Status {
    std::vector<model::ForwardSegment> segs;
    for (int64_t i = 0; i < batch; ++i) {
      next[static_cast<size_t>(i)] = token(rng);
      segs.push_back({seqs[static_cast<size_t>(i)].get(), std::span<const int32_t>(&next[static_cast<size_t>(i)], 1),
                      false});
    }
    return m.Forward(segs).status();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) FERRY_RETURN_IF_ERROR(step());
  const int steps = absl::GetFlag(FLAGS_steps);
  (void)comm.TakeBytes();
  const model::OwnerSplitStats before = m.owner_split_stats();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(step());  // the logits come back: the step has finished on the device
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const model::OwnerSplitStats after = m.owner_split_stats();
  std::sort(ms.begin(), ms.end());
  Measured r;
  r.step_ms = ms[ms.size() / 2];
  r.sent_bytes = static_cast<double>(comm.TakeBytes()) / steps;
  r.split_bytes = 4.0 * static_cast<double>(after.floats_sent - before.floats_sent) / steps;
  r.exchange_ms = 1e3 * (after.exchange_seconds - before.exchange_seconds) / steps;
  return r;
}

int RunRank(int rank, model::Collective* collective) {
  auto* comm = dynamic_cast<dataplane::GroupCollective*>(collective);
  const int world = absl::GetFlag(FLAGS_ranks);
  auto fail = [rank](const absl::Status& st) {
    fprintf(stderr, "ferry-bench-split: rank %d: %s\n", rank, std::string(st.message()).c_str());
    return 1;
  };
  if (comm == nullptr) return fail(absl::InvalidArgumentError("--ranks must be at least 2"));
  const int gpus = kernels::cuda::DeviceCount();
  if (gpus == 0) return fail(absl::FailedPreconditionError("no CUDA device"));
  if (absl::Status st = kernels::cuda::UseDevice(rank % gpus); !st.ok()) return fail(st);
  std::ifstream in(absl::GetFlag(FLAGS_config));
  if (!in) return fail(absl::NotFoundError(absl::StrCat("cannot read ", absl::GetFlag(FLAGS_config))));
  std::vector<int> layers;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v)) return fail(absl::InvalidArgumentError("--layers: integers, comma-separated"));
    layers.push_back(v);
  }
  auto json = bench::KeepLayers(nlohmann::json::parse(in), layers);
  if (!json.ok()) return fail(json.status());
  auto rc = bench::RandomCheckpoint::Create(*json, absl::GetFlag(FLAGS_seed), absl::GetFlag(FLAGS_config));
  if (!rc.ok()) return fail(rc.status());
  const model::TensorParallel tp{rank, world, comm};
  auto m = Load(**rc, tp);
  if (!m.ok()) return fail(m.status());
  const model::ModelConfig& c = (*m)->config();
  int64_t mla = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) mla += c.layer_types[static_cast<size_t>(l)] == model::AttentionType::kMla;
  std::vector<int64_t> batches;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 1) return fail(absl::InvalidArgumentError("--batches: positive integers"));
    batches.push_back(v);
  }
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));  // the same tokens on every rank
  if (rank == 0) {
    printf("%s, layers %s (%lld MLA of %lld), W = %d, context %lld, page %lld, bf16; per decode step; bytes sent by "
           "each rank (with W = 2 what one rank sends the other receives)\n\n",
           absl::GetFlag(FLAGS_config).c_str(), absl::GetFlag(FLAGS_layers).c_str(), static_cast<long long>(mla),
           static_cast<long long>(c.num_layers), world, static_cast<long long>(absl::GetFlag(FLAGS_context)),
           static_cast<long long>(absl::GetFlag(FLAGS_page_size)));
    printf("| batch | split | step ms | rank | sent KiB | split KiB / MLA layer | reductions KiB / layer | split "
           "exchange ms |\n|---|---|---|---|---|---|---|---|\n");
  }
  for (int64_t batch : batches) {
    for (bool split : {false, true}) {
      auto r = RunCase(**m, *comm, tp, batch, split, rng);
      if (!r.ok()) return fail(r.status());
      // Every rank's numbers to every rank (each fills its own slot of a sum).
      std::vector<float> all(static_cast<size_t>(world * kFields), 0.0f);
      float* mine = all.data() + rank * kFields;
      mine[0] = static_cast<float>(r->step_ms);
      mine[1] = static_cast<float>(r->sent_bytes);
      mine[2] = static_cast<float>(r->split_bytes);
      mine[3] = static_cast<float>(r->exchange_ms);
      if (absl::Status st = comm->AllReduceSum(all.data(), static_cast<int64_t>(all.size())); !st.ok()) return fail(st);
      (void)comm->TakeBytes();
      if (rank != 0) continue;
      for (int q = 0; q < world; ++q) {
        const float* v = all.data() + q * kFields;
        printf("| %lld | %s | %.2f | %d | %.1f | %.1f | %.1f | %.3f |\n", static_cast<long long>(batch),
               split ? "on" : "off", v[0], q, v[1] / 1024, mla > 0 ? v[2] / 1024 / mla : 0.0,
               (v[1] - v[2]) / 1024 / c.num_layers, v[3]);
      }
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ferry-bench-split [--config FILE --layers 0,4,3 --ranks 2 --batches 1,8]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_ranks) < 2) {
    fprintf(stderr, "ferry-bench-split: --ranks %d: need at least 2\n", absl::GetFlag(FLAGS_ranks));
    return 2;
  }
  return ferry::dataplane::RunProcessGroup(absl::GetFlag(FLAGS_ranks), std::chrono::seconds(120), RunRank);
}
