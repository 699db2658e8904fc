// ferry-cuda-model-check: the CUDA model (model/cuda) against transformers' goldens and against
// itself, finer-grained than `ferry check-golden --device cuda` (which gives one number a prompt):
// in both precisions (float32: held to 1e-4 relative a layer and 1e-3 logits; bf16: 1 and 2 printed):
//   1. p1's residual stream layer by layer (golden p1.hidden.L), CUDA and CPU side by side, and
//      each layer alone from transformers' input to it;
//   2. every prompt's prefill logits, the max |error| at each position;
//   3. the decode path: p1 fed token by token equals p1 prefilled (max |difference|);
//   4. batching: p0 and p2 in one step equal each alone (max |difference|);
//   5. pages: a fork at a partial page and a rewind continue as the uninterrupted prefill, and a
//      fixed arena too small refuses a step with RESOURCE_EXHAUSTED, keeping nothing;
//   6. FP8 experts (bf16, on a device with GroupedLinearW8A8): the checkpoint with its experts
//      quantized to FP8 as the FP8 releases store them, run W8A8 and upcast, against the CPU
//      reference on the same weights;
//   7. NVFP4 experts (bf16): the checkpoint with its experts in NVFP4, kept packed and upcast,
//      against a float32 run over the same weights (cuda_nvfp4_check.cc).
// 3, 4 and 5 in bf16: the later runs pinned to the first's indexer and routing decisions (a
// decode row and a prefill row take different summation orders: GemvBf16 and cuBLAS) and held to
// check-golden's pinned bf16 tolerance (3) or 0.1 logits (4, 5).
// Without a CUDA device it says so and exits 0 (what CI sees).
//
//   ferry-cuda-model-check [--model DIR] [--mla-tc-small]   (default model: tests/data/glm-dsa-tiny under the
//   source dir; --mla-tc-small: the small MLA form, kernels/cuda/options.h)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/cuda/glm_moe_dsa_cuda.h"
#include "model/cuda/load_cuda.h"
#include "model/golden/decision_log.h"
#include "tests/model/cuda_carry_check.h"
#include "tests/model/cuda_nvfp4_check.h"
#include "model/families/glm5_next.h"
#include "model/families/glm_moe_dsa.h"
#include "model/golden/golden.h"
#include "model/checkpoint/safetensors.h"

namespace {

using namespace ferry::model;

#define CHECK_OK(expr)                                                                  \
  do {                                                                                  \
    const absl::Status s_ = (expr);                                                     \
    if (!s_.ok()) {                                                                     \
      fprintf(stderr, "%s: %s\n", #expr, std::string(s_.message()).c_str());            \
      return 2;                                                                         \
    }                                                                                   \
  } while (0)

double RelErr(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

float MaxAbs(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

absl::StatusOr<ForwardOutput> Hidden(CausalLM& m, std::span<const int32_t> ids, std::vector<std::vector<float>>* hidden) {
  auto seq = m.NewSequence();
  ForwardSegment seg{seq.get(), ids, true};
  const std::span<const ForwardSegment> segs(&seg, 1);
  if (auto* x = dynamic_cast<GlmMoeDsa*>(&m)) return x->ForwardWithHidden(segs, hidden);
  if (auto* x = dynamic_cast<Glm5Next*>(&m)) return x->ForwardWithOptions(segs, hidden);
  if (auto* x = dynamic_cast<cuda::GlmMoeDsaCuda*>(&m)) return x->ForwardWithHidden(segs, hidden);
  if (auto* x = dynamic_cast<cuda::Glm5NextCuda*>(&m)) return x->ForwardWithHidden(segs, hidden);
  return absl::InternalError("unknown model class");
}
absl::StatusOr<ForwardOutput> Run(CausalLM& m, std::span<const int32_t> ids, std::vector<std::vector<float>>* hidden) {
  return Hidden(m, ids, hidden);
}

int Main(const std::string& dir, cuda::Precision precision) {
  const bool f32 = precision == cuda::Precision::kF32;
  printf("== %s, precision %s\n", dir.c_str(), cuda::PrecisionName(precision));
  absl::StatusOr<Checkpoint> ck = Checkpoint::Open(dir);
  CHECK_OK(ck.status());
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ck->config_json(), ck->config_path());
  CHECK_OK(cfg.status());
  const bool dsa = cfg->family == Family::kGlmMoeDsa;
  const CacheOptions pages16{16, -1};  // small pages: many a prompt
  std::unique_ptr<CausalLM> cpu, gpu;
  if (dsa) {
    auto c = GlmMoeDsa::Load(*ck, *cfg);
    CHECK_OK(c.status());
    cpu = std::move(*c);
    auto g = cuda::GlmMoeDsaCuda::Load(*ck, *cfg, pages16, precision);
    CHECK_OK(g.status());
    gpu = std::move(*g);
  } else {
    auto c = Glm5Next::Load(*ck, *cfg);
    CHECK_OK(c.status());
    cpu = std::move(*c);
    auto g = cuda::Glm5NextCuda::Load(*ck, *cfg, pages16, precision);
    CHECK_OK(g.status());
    gpu = std::move(*g);
  }
  auto goldens = ReadGolden(dir + "/golden.safetensors");
  CHECK_OK(goldens.status());
  auto file = SafetensorsFile::Open(dir + "/golden.safetensors");
  CHECK_OK(file.status());
  const int64_t V = cfg->vocab_size;
  int bad = 0;

  // Sections 1 and 3 use p1; 4 the first and the last prompt; 5 the last, cut at token 40.
  if (goldens->size() < 2 || goldens->back().ids.size() <= 40) {
    fprintf(stderr, "%s/golden.safetensors: needs two prompts or more, the last longer than 40 tokens\n", dir.c_str());
    return 2;
  }
  // Counts the own choices of a replay that differ from its tape beyond a near tie (float32 fails
  // on any: the tape is the reference's, whose margins it carries).
  int64_t beyond_tie = 0;
  auto count_beyond = [&](const DecisionStats& st) {
    for (const DecisionDifference& d : st.differences) beyond_tie += d.margin <= kSelectionNearTie ? 0 : 1;
  };
  // A golden prompt + continuation in one forward, as transformers made the goldens: with the
  // reference's selections replayed when the golden records them (sections 1 and 2).
  auto run_golden = [&](CausalLM& m, const GoldenPrompt& g,
                        std::vector<std::vector<float>>* hidden) -> absl::StatusOr<ForwardOutput> {
    std::vector<int32_t> ids = g.ids;
    ids.insert(ids.end(), g.greedy.begin(), g.greedy.end());
    if (g.selections.empty()) return Run(m, ids, hidden);
    FERRY_ASSIGN_OR_RETURN(DecisionLog tape, ReferenceTape(*cfg, g));
    tape.Start(DecisionLog::Mode::kReplay);
    m.set_decision_log(&tape);
    absl::StatusOr<ForwardOutput> o = Run(m, ids, hidden);
    m.set_decision_log(nullptr);
    FERRY_RETURN_IF_ERROR(o.status());
    FERRY_RETURN_IF_ERROR(tape.Finish());
    if (&m == gpu.get()) {
      printf("%s: the reference's selections replayed; own choices differ at %ld of %ld\n", g.name.c_str(),
             static_cast<long>(tape.stats().differing), static_cast<long>(tape.stats().decisions));
      if (f32) count_beyond(tape.stats());
    }
    return o;
  };
  // 1. p1 prompt + continuation, teacher-forced in one forward, as the golden hidden states were made.
  const GoldenPrompt& g1 = (*goldens)[1];
  std::vector<int32_t> ids1 = g1.ids;
  ids1.insert(ids1.end(), g1.greedy.begin(), g1.greedy.end());
  std::vector<std::vector<float>> h_cpu, h_gpu;
  auto o_cpu = run_golden(*cpu, g1, &h_cpu);
  CHECK_OK(o_cpu.status());
  auto o_gpu = run_golden(*gpu, g1, &h_gpu);
  CHECK_OK(o_gpu.status());
  printf("p1 residual stream, relative norm error vs transformers (cuda | cpu):\n");
  for (size_t L = 0; L < h_gpu.size(); ++L) {
    const TensorInfo* t = file->Find("p1.hidden." + std::to_string(L));
    if (t == nullptr || t->numel() != static_cast<int64_t>(h_gpu[L].size())) continue;
    const float* want = reinterpret_cast<const float*>(file->Data(*t));
    const double e = RelErr(h_gpu[L].data(), want, h_gpu[L].size());
    printf("  hidden.%zu  %.3e | %.3e\n", L, e, RelErr(h_cpu[L].data(), want, h_cpu[L].size()));
    bad += f32 && e > 1e-4;  // float32: only summation order differs
  }
  // 1b. Each layer alone, started from transformers' input to it.
  {
    std::vector<std::vector<float>> inputs;
    for (int64_t L = 0; L < cfg->num_layers; ++L) {
      const TensorInfo* t = file->Find("p1.hidden." + std::to_string(L));
      if (t == nullptr) break;
      const float* v = reinterpret_cast<const float*>(file->Data(*t));
      inputs.emplace_back(v, v + t->numel());
    }
    auto* dsa_gpu = dynamic_cast<cuda::GlmMoeDsaCuda*>(gpu.get());
    if (dsa_gpu != nullptr && static_cast<int64_t>(inputs.size()) == cfg->num_layers) {
      auto seq = dsa_gpu->NewSequence();
      ForwardSegment seg{seq.get(), ids1, true};
      std::vector<std::vector<float>> out;
      auto o = dsa_gpu->ForwardWithHidden(std::span<const ForwardSegment>(&seg, 1), &out, &inputs);
      CHECK_OK(o.status());
      printf("each layer alone from transformers' input (cuda), relative norm error of its output, worst rows:\n");
      const int64_t D = cfg->hidden_size, R = static_cast<int64_t>(ids1.size());
      for (size_t L = 1; L < out.size(); ++L) {
        const TensorInfo* t = file->Find("p1.hidden." + std::to_string(L));
        if (t == nullptr) continue;
        const float* want = reinterpret_cast<const float*>(file->Data(*t));
        printf("  layer %zu: %.3e  rows:", L - 1, RelErr(out[L].data(), want, out[L].size()));
        for (int64_t r = 0; r < R; ++r) {
          const double e = RelErr(out[L].data() + r * D, want + r * D, D);
          if (e > 2e-2) printf(" %ld(%.2f)", static_cast<long>(r), e);
        }
        printf("\n");
      }
    }
  }
  // 2. Per position, the max |logit error| of that one forward (cuda).
  for (const GoldenPrompt& g : *goldens) {
    const size_t positions = g.ids.size() + g.greedy.size();
    auto o = run_golden(*gpu, g, nullptr);
    CHECK_OK(o.status());
    printf("%s max |logit error| by position (cuda, one forward of %zu tokens):", g.name.c_str(), positions);
    float worst = 0;
    for (size_t i = 0; i < positions; ++i) {
      const float e = MaxAbs(o->logits.data() + i * V, g.logits.data() + i * V, V);
      worst = std::max(worst, e);
      printf("%s%.3f", i % 16 == 0 ? "\n   " : " ", e);
    }
    printf("\n  worst %.3f\n", worst);
    bad += f32 && worst > 1e-3f;
  }
  // bf16 compares runs that feed the same tokens in other steps (sections 3 and 4): the second
  // run replays the first's indexer and routing decisions (model/golden/decision_log.h). A different
  // summation order (one row a step: GemvBf16; many: cuBLAS) changes last bits, and on these
  // random checkpoints that flips near-tied decisions, which a logit comparison cannot tell from
  // a bug; the flips are counted and printed. float32 runs free, except on a golden that records
  // the reference's selections (sections 1, 2 and 3): there every run of a golden prompt replays
  // them (section 3: the prefill whole, the decode re-cut a row a step), and an own choice that
  // differs where the reference's margin exceeds kSelectionNearTie is an error.
  DecisionLog tape;
  using Rows = std::vector<DecisionLog::RowRange>;
  // Bounds on a pinned bf16 pair of runs. Token by token: check-golden's for a pinned bf16 run
  // (every dense projection of a decode row sums in GemvBf16's order, a prefill row in cuBLAS's;
  // measured 0.080 / 0.23). Batching and pages: 0.1 (only the MoE layers change their way there,
  // the device dispatch up to 64 rows against the host's above; measured at most 0.047).
  const float tol = f32 ? 1e-3f : static_cast<float>(PinnedBf16Tolerance(cfg->family));
  const float step_tol = f32 ? 1e-3f : 0.1f;
  // Records `run`'s decisions (bf16), then arms the tape, re-cut into `steps`, for the next runs.
  // `reference`: replay it in the first run instead (float32 too) and re-cut it.
  auto record = [&](auto run, const Rows& steps, const DecisionLog* reference = nullptr) -> absl::Status {
    if (f32 && reference == nullptr) return run();
    if (reference != nullptr) {
      tape = *reference;
      tape.Start(DecisionLog::Mode::kReplay);
    } else {
      tape.Start(DecisionLog::Mode::kRecord);
    }
    gpu->set_decision_log(&tape);
    absl::Status st = run();
    gpu->set_decision_log(nullptr);
    FERRY_RETURN_IF_ERROR(st);
    FERRY_RETURN_IF_ERROR(tape.Finish());
    if (reference != nullptr) {
      printf("  (the reference's selections replayed; the one forward's own differ at %ld of %ld)\n",
             static_cast<long>(tape.stats().differing), static_cast<long>(tape.stats().decisions));
      count_beyond(tape.stats());
    }
    FERRY_ASSIGN_OR_RETURN(tape, tape.Recut(steps));
    tape.Start(DecisionLog::Mode::kReplay);
    gpu->set_decision_log(&tape);
    return absl::OkStatus();
  };
  bool pinned_pair = false;  // a tape is armed for the run being compared
  auto replayed = [&]() -> absl::Status {
    if (!pinned_pair) return absl::OkStatus();
    gpu->set_decision_log(nullptr);
    FERRY_RETURN_IF_ERROR(tape.Finish());
    printf("  (pinned to the first run's decisions; %ld of %ld would have differed)\n",
           static_cast<long>(tape.stats().differing), static_cast<long>(tape.stats().decisions));
    count_beyond(tape.stats());
    return absl::OkStatus();
  };

  // 3. Token by token (the decode path, one row a step) against the one-forward logits.
  {
    std::optional<DecisionLog> reference;
    if (!g1.selections.empty()) {
      auto whole = ReferenceTape(*cfg, g1);  // one step of every row: the one forward
      CHECK_OK(whole.status());
      reference = std::move(*whole);
    }
    pinned_pair = !f32 || reference.has_value();
    std::vector<float> want = o_gpu->logits;
    CHECK_OK(record(
        [&]() -> absl::Status {
          FERRY_ASSIGN_OR_RETURN(ForwardOutput o, Run(*gpu, ids1, nullptr));
          want = std::move(o.logits);
          return absl::OkStatus();
        },
        [&] {
          Rows ones;
          for (size_t i = 0; i < ids1.size(); ++i) ones.push_back({static_cast<int64_t>(i), 1});
          return ones;
        }(),
        reference ? &*reference : nullptr));
    auto seq = gpu->NewSequence();
    float worst = 0;
    for (size_t i = 0; i < ids1.size(); ++i) {
      ForwardSegment seg{seq.get(), std::span<const int32_t>(&ids1[i], 1), false};
      auto o = gpu->Forward(std::span<const ForwardSegment>(&seg, 1));
      CHECK_OK(o.status());
      worst = std::max(worst, MaxAbs(o->logits.data(), want.data() + i * V, V));
    }
    printf("decode path: p1 token by token vs one forward, max |difference| %.3g\n", worst);
    CHECK_OK(replayed());
    bad += worst > tol;
    pinned_pair = !f32;
  }
  // 4. Two conversations in one step vs each alone.
  {
    const GoldenPrompt &g0 = goldens->front(), &g2 = goldens->back();
    auto s0 = gpu->NewSequence(), s2 = gpu->NewSequence();
    ForwardSegment segs[2] = {{s0.get(), g0.ids, true}, {s2.get(), g2.ids, true}};
    absl::StatusOr<ForwardOutput> both;
    CHECK_OK(record(
        [&]() -> absl::Status {
          both = gpu->Forward(segs);
          return both.status();
        },
        Rows{{0, static_cast<int64_t>(g0.ids.size())},
             {static_cast<int64_t>(g0.ids.size()), static_cast<int64_t>(g2.ids.size())}}));
    auto a0 = Run(*gpu, g0.ids, nullptr);
    auto a2 = Run(*gpu, g2.ids, nullptr);
    CHECK_OK(a0.status());
    CHECK_OK(a2.status());
    const float d0 = MaxAbs(both->logits.data(), a0->logits.data(), a0->logits.size());
    const float d2 = MaxAbs(both->logits.data() + both->first_row[1] * V, a2->logits.data(), a2->logits.size());
    printf("batching: p0 + p2 in one step vs alone, max |difference| %.3g and %.3g\n", d0, d2);
    CHECK_OK(replayed());
    bad += std::max(d0, d2) > step_tol;
  }
  // 5. Pages (16 tokens each): a fork at a partial page and a rewind both continue exactly as
  //    the uninterrupted prefill; a fixed arena too small refuses the step and keeps nothing.
  {
    const GoldenPrompt& g2 = goldens->back();
    const std::vector<int32_t>& ids = g2.ids;
    const int64_t cut = 40, n = static_cast<int64_t>(ids.size());  // 40 % 16 != 0: a shared partial page
    auto one = gpu->NewSequence();
    ForwardSegment whole{one.get(), ids, true};
    absl::StatusOr<ForwardOutput> full;
    // The head, the tail, the tail again after the fork and after the rewind (bf16: pinned).
    CHECK_OK(record(
        [&]() -> absl::Status {
          full = gpu->Forward(std::span<const ForwardSegment>(&whole, 1));
          return full.status();
        },
        Rows{{0, cut}, {cut, n - cut}, {cut, n - cut}, {cut, n - cut}}));
    // The same prompt in two steps with a snapshot at the cut (glm5_next's KDA state rewinds and
    // forks only there; a no-op for glm_moe_dsa).
    auto seq = gpu->NewSequence();
    auto head = std::span<const int32_t>(ids.data(), static_cast<size_t>(cut));
    auto tail = std::span<const int32_t>(ids.data() + cut, static_cast<size_t>(n - cut));
    ForwardSegment hseg{seq.get(), head, false};
    CHECK_OK(gpu->Forward(std::span<const ForwardSegment>(&hseg, 1)).status());
    seq->KeepSnapshot();
    ForwardSegment tseg{seq.get(), tail, false};
    CHECK_OK(gpu->Forward(std::span<const ForwardSegment>(&tseg, 1)).status());
    auto fork = seq->ForkAt(cut);
    CHECK_OK(fork.status());
    ForwardSegment fseg{fork->get(), tail, true};
    auto after_fork = gpu->Forward(std::span<const ForwardSegment>(&fseg, 1));
    CHECK_OK(after_fork.status());
    CHECK_OK(seq->RewindTo(cut));
    ForwardSegment rseg{seq.get(), tail, true};
    auto after_rewind = gpu->Forward(std::span<const ForwardSegment>(&rseg, 1));
    CHECK_OK(after_rewind.status());
    const float* want = full->logits.data() + cut * V;
    const float df = MaxAbs(after_fork->logits.data(), want, after_fork->logits.size());
    const float dr = MaxAbs(after_rewind->logits.data(), want, after_rewind->logits.size());
    printf("pages: fork at %ld then the rest vs one prefill %.3g, rewind to %ld then the rest %.3g; %ld pages in use\n",
           static_cast<long>(cut), df, static_cast<long>(cut), dr, static_cast<long>(gpu->arena().used_pages()));
    CHECK_OK(replayed());
    bad += std::max(df, dr) > step_tol;
    // 4 pages (64 tokens): fixed at load for glm_moe_dsa, sized after the load (a worker's
    // plan) for glm5_next; a second sizing is refused.
    std::unique_ptr<CausalLM> small;
    absl::Status again;
    if (dsa) {
      auto s = cuda::GlmMoeDsaCuda::Load(*ck, *cfg, CacheOptions{16, 4}, precision);
      CHECK_OK(s.status());
      again = (*s)->SizeArena(8);
      small = std::move(*s);
    } else {
      auto s = cuda::Glm5NextCuda::Load(*ck, *cfg, CacheOptions{16, -1}, precision);
      CHECK_OK(s.status());
      CHECK_OK((*s)->SizeArena(4));
      again = (*s)->SizeArena(8);
      small = std::move(*s);
    }
    printf("pages: sizing a sized arena again: %s\n", std::string(again.message()).c_str());
    bad += again.code() != absl::StatusCode::kFailedPrecondition;
    auto s1 = small->NewSequence();
    ForwardSegment big{s1.get(), ids, false};
    auto refused = small->Forward(std::span<const ForwardSegment>(&big, 1));
    printf("pages: %ld tokens on a 4-page arena: %s; length %ld, %ld pages in use after\n", static_cast<long>(n),
           refused.ok() ? "accepted" : std::string(refused.status().message()).c_str(), static_cast<long>(s1->length()),
           static_cast<long>(small->arena().used_pages()));
    bad += refused.ok() || refused.status().code() != absl::StatusCode::kResourceExhausted || s1->length() != 0 ||
           small->arena().used_pages() != 0;
  }
  if (f32 && beyond_tie > 0) {
    printf("%ld own choices differ from the reference's beyond a near tie\n", static_cast<long>(beyond_tie));
    ++bad;
  }
  printf("%s: %s\n", cuda::PrecisionName(precision), bad == 0 ? "ok" : "FAILED");
  return bad == 0 ? 0 : 1;
}

// W8A8's logit bound as a multiple of the pinned bf16 one (PinnedBf16Tolerance): measured on the
// H200 (2026-12-01), every golden prompt, at most 0.654 (glm-dsa-tiny, pinned bf16 bound 0.5) and
// 1.126 (glm5next-tiny, 1.5): 1.7 x leaves glm-dsa-tiny's ~30% to spare.
constexpr double kFp8LogitTolerance = 1.7;

// The checkpoint `ck` with every routed and shared expert matrix stored as the FP8 releases
// store them (E4M3, one float32 scale a 128 x 128 block: s = max |w| / 448, q = E4M3(w / s)) and
// every other tensor as float32, in host memory that *keep holds. An expert matrix whose name
// contains `leave` (when not empty) stays float32.
absl::StatusOr<Checkpoint> Fp8ExpertsCheckpoint(const Checkpoint& ck, std::vector<std::vector<uint8_t>>* keep,
                                                const std::string& leave = "") {
  std::vector<Checkpoint::HostTensor> tensors;
  auto hold = [&](std::vector<uint8_t> bytes) { return keep->emplace_back(std::move(bytes)).data(); };
  for (const std::string& name : ck.TensorNames()) {
    const std::vector<int64_t> shape = ck.Find(name)->shape;
    FERRY_ASSIGN_OR_RETURN(std::vector<float> v, ck.LoadF32(name, shape));
    const bool expert = (name.find(".mlp.experts.") != std::string::npos ||
                         name.find(".mlp.shared_experts.") != std::string::npos) &&
                        name.size() > 12 && name.compare(name.size() - 12, 12, "_proj.weight") == 0 &&
                        (leave.empty() || name.find(leave) == std::string::npos);
    if (!expert || shape.size() != 2) {
      std::vector<uint8_t> raw(v.size() * sizeof(float));
      std::memcpy(raw.data(), v.data(), raw.size());
      tensors.push_back({name, ferry::DType::kF32, shape, hold(std::move(raw))});
      continue;
    }
    const int64_t rows = shape[0], cols = shape[1], br = (rows + 127) / 128, bc = (cols + 127) / 128;
    std::vector<uint8_t> q(v.size());
    std::vector<float> sc(static_cast<size_t>(br * bc));
    for (int64_t i = 0; i < br; ++i) {
      for (int64_t j = 0; j < bc; ++j) {
        float amax = 0.0f;
        for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r) {
          for (int64_t k = j * 128; k < std::min(cols, j * 128 + 128); ++k) amax = std::max(amax, std::fabs(v[r * cols + k]));
        }
        const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
        sc[i * bc + j] = s;
        for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r) {
          for (int64_t k = j * 128; k < std::min(cols, j * 128 + 128); ++k) q[r * cols + k] = ferry::F32ToF8E4M3(v[r * cols + k] / s);
        }
      }
    }
    std::vector<uint8_t> scale_raw(sc.size() * sizeof(float));
    std::memcpy(scale_raw.data(), sc.data(), scale_raw.size());
    tensors.push_back({name, ferry::DType::kF8E4M3, shape, hold(std::move(q))});
    tensors.push_back({name + "_scale_inv", ferry::DType::kF32, {br, bc}, hold(std::move(scale_raw))});
  }
  nlohmann::json config = ck.config_json();
  config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  return Checkpoint::FromHost(config, std::move(tensors), ck.dir() + " (experts in FP8)");
}

absl::StatusOr<std::unique_ptr<CausalLM>> LoadCuda(const Checkpoint& ck, const ModelConfig& c, cuda::Precision p,
                                                   bool fp8_experts) {
  cuda::CudaLoadOptions opts(p);
  opts.fp8_experts = fp8_experts;
  absl::StatusOr<std::unique_ptr<CausalLM>> m;
  if (c.family == Family::kGlmMoeDsa) {
    auto g = cuda::GlmMoeDsaCuda::Load(ck, c, CacheOptions{16, -1}, opts);
    m = g.ok() ? absl::StatusOr<std::unique_ptr<CausalLM>>(std::move(*g)) : g.status();
  } else {
    auto g = cuda::Glm5NextCuda::Load(ck, c, CacheOptions{16, -1}, opts);
    m = g.ok() ? absl::StatusOr<std::unique_ptr<CausalLM>>(std::move(*g)) : g.status();
  }
  return m;
}

// 6. FP8 experts, every golden prompt's prefill: the experts kept in FP8 (W8A8) and upcast
// (bf16), both pinned to the indexer and routing decisions of a float32 run on the same
// checkpoint (upcast weights, the reference; sections 1-2 hold that path to the goldens), by
// max |logit error| and relative norm error. W8A8 adds the activations' E4M3 rounding (3
// mantissa bits) to the upcast run's bf16 rounding.
int Fp8Main(const std::string& dir) {
  if (!ferry::kernels::cuda::GroupedLinearFp8Available()) {
    printf("fp8 experts: skipped (GroupedLinearW8A8 needs sm_90a code and a compute capability 9.0 device)\n");
    return 0;
  }
  absl::StatusOr<Checkpoint> ck = Checkpoint::Open(dir);
  CHECK_OK(ck.status());
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ck->config_json(), ck->config_path());
  CHECK_OK(cfg.status());
  std::vector<std::vector<uint8_t>> keep;
  absl::StatusOr<Checkpoint> fck = Fp8ExpertsCheckpoint(*ck, &keep);
  CHECK_OK(fck.status());
  auto ref = LoadCuda(*fck, *cfg, cuda::Precision::kF32, true);
  CHECK_OK(ref.status());
  auto w8a8 = LoadCuda(*fck, *cfg, cuda::Precision::kBf16, true);
  CHECK_OK(w8a8.status());
  auto upcast = LoadCuda(*fck, *cfg, cuda::Precision::kBf16, false);
  CHECK_OK(upcast.status());
  // The packed FP8 tiles are 128 rows high: on these narrow experts (32 rows) they take more
  // bytes than bf16, so the sizes differ either way; equal sizes would mean nothing was kept.
  printf("== %s, experts in FP8: weights on the device %.2f MB kept in FP8, %.2f MB upcast\n", dir.c_str(),
         (*w8a8)->weight_bytes() / 1e6, (*upcast)->weight_bytes() / 1e6);
  int bad = (*w8a8)->weight_bytes() == (*upcast)->weight_bytes();
  // A layer whose experts do not share one format, and an expert stored partly in FP8: refused
  // by name at load.
  for (const auto& [leave, want] : std::vector<std::pair<std::string, std::string>>{
           {".mlp.experts.1.", "expert 1 is not stored in FP8 but expert 0 is"},
           {".mlp.experts.0.down_proj.", "gate_proj.weight is stored in FP8 (128 x 128 blocks) but up_proj / "
                                         "down_proj are not"}}) {
    std::vector<std::vector<uint8_t>> keep2;
    absl::StatusOr<Checkpoint> mixed = Fp8ExpertsCheckpoint(*ck, &keep2, leave);
    CHECK_OK(mixed.status());
    auto refused = LoadCuda(*mixed, *cfg, cuda::Precision::kBf16, true);
    const std::string msg = refused.ok() ? "loaded" : std::string(refused.status().message());
    printf("  experts in FP8 but those named %s: %s\n", leave.c_str(), msg.c_str());
    bad += refused.ok() || refused.status().code() != absl::StatusCode::kInvalidArgument ||
           msg.find(want) == std::string::npos;
  }
  auto goldens = ReadGolden(dir + "/golden.safetensors");
  CHECK_OK(goldens.status());
  DecisionLog tape;
  auto run = [&](CausalLM& m, const std::vector<int32_t>& ids, DecisionLog::Mode mode) -> absl::StatusOr<ForwardOutput> {
    tape.Start(mode);
    m.set_decision_log(&tape);
    absl::StatusOr<ForwardOutput> o = Run(m, ids, nullptr);
    m.set_decision_log(nullptr);
    FERRY_RETURN_IF_ERROR(tape.Finish());
    return o;
  };
  float worst8 = 0, worst16 = 0;
  for (const GoldenPrompt& g : *goldens) {
    auto want = run(**ref, g.ids, DecisionLog::Mode::kRecord);
    CHECK_OK(want.status());
    auto got8 = run(**w8a8, g.ids, DecisionLog::Mode::kReplay);
    CHECK_OK(got8.status());
    const long flips8 = static_cast<long>(tape.stats().differing);
    auto got16 = run(**upcast, g.ids, DecisionLog::Mode::kReplay);
    CHECK_OK(got16.status());
    const size_t n = want->logits.size();
    const float m8 = MaxAbs(got8->logits.data(), want->logits.data(), n);
    const float m16 = MaxAbs(got16->logits.data(), want->logits.data(), n);
    printf("  %s (%zu tokens): max |logit error| W8A8 %.3f, upcast bf16 %.3f; relative W8A8 %.2e, upcast %.2e "
           "(pinned: %ld resp. %ld decisions would have differed)\n",
           g.name.c_str(), g.ids.size(), m8, m16, RelErr(got8->logits.data(), want->logits.data(), n),
           RelErr(got16->logits.data(), want->logits.data(), n), flips8, static_cast<long>(tape.stats().differing));
    worst8 = std::max(worst8, m8);
    worst16 = std::max(worst16, m16);
  }
  const double tol = kFp8LogitTolerance * PinnedBf16Tolerance(cfg->family);
  bad += !(worst8 <= tol) || !(worst16 <= PinnedBf16Tolerance(cfg->family));
  printf("fp8 experts: worst max |logit error| W8A8 %.3f (bound %.2f), upcast bf16 %.3f (bound %.2f): %s\n", worst8,
         tol, worst16, PinnedBf16Tolerance(cfg->family), bad == 0 ? "ok" : "FAILED");
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = FERRY_TEST_DATA_DIR "/glm-dsa-tiny";
  ferry::kernels::cuda::KernelOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (std::strcmp(argv[i], "--mla-tc-small") == 0) {
      options.mla_tc_small = true;
    } else {
      fprintf(stderr, "usage: ferry-cuda-model-check [--model DIR] [--mla-tc-small]\n");
      return 2;
    }
  }
  ferry::kernels::cuda::SetKernelOptions(options);
  if (ferry::kernels::cuda::DeviceCount() == 0) {
    printf("ferry-cuda-model-check: no CUDA device: skipped\n");
    return 0;
  }
  // float32: held to the goldens (layers 1e-4, logits 1e-3) and to itself; bf16: numbers only
  // (near-tied top-k and routing decisions flip under bf16 rounding) plus self-consistency.
  const int f32 = Main(dir, ferry::model::cuda::Precision::kF32);
  const int bf16 = Main(dir, ferry::model::cuda::Precision::kBf16);
  const int fp8 = Fp8Main(dir);
  const int carry = ferry::model::CarryMain(ferry::model::cuda::Precision::kBf16) +
                      ferry::model::CarryMain(ferry::model::cuda::Precision::kF32);
  const int nvfp4 = ferry::model::Nvfp4Main(dir);
  const bool ok = f32 == 0 && bf16 == 0 && fp8 == 0 && carry == 0 && nvfp4 == 0;
  printf("cuda model check: %s\n", ok ? "done" : "FAILED");
  return ok ? 0 : 1;
}
