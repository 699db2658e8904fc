#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/load_model.h"
#include "dataplane/process_group.h"
#include "model/families/causal_lm.h"
#include "model/golden/decision_log.h"
#include "model/golden/golden.h"

#ifdef FERRY_WITH_CUDA
#include "dataplane/nccl_collective.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/load_cuda.h"
#endif

namespace ferry::cli {
namespace {

using model::DecisionLog;
using model::DecisionSite;
using model::DecisionStats;
using model::GoldenPrompt;
using model::GoldenResult;

// "N of M decisions differ (indexer a of b, experts c of d), positions p of q".
void PrintDecisionStats(const DecisionStats& s) {
  const int ix = static_cast<int>(DecisionSite::kIndexerTopK), ex = static_cast<int>(DecisionSite::kMoeExperts);
  printf("%lld of %lld row decisions differ (indexer top-k %lld of %lld, MoE experts %lld of %lld), "
         "positions with one %lld of %lld",
         static_cast<long long>(s.differing), static_cast<long long>(s.decisions),
         static_cast<long long>(s.differing_by_site[ix]), static_cast<long long>(s.by_site[ix]),
         static_cast<long long>(s.differing_by_site[ex]), static_cast<long long>(s.by_site[ex]),
         static_cast<long long>(s.positions_differing), static_cast<long long>(s.positions));
}

// A pinned check's selections: how many of the engine's own differ from the reference's, how
// near the reference's choice was at each, and the first ones beyond a near tie.
void PrintSelections(const GoldenResult& r) {
  if (!r.pinned) return;
  const DecisionStats& s = r.selections;
  printf("  selections pinned to the reference's; its own ");
  PrintDecisionStats(s);
  float largest_tie = 0.0f;
  for (const model::DecisionDifference& d : s.differences) {
    if (d.margin <= model::kSelectionNearTie) largest_tie = std::max(largest_tie, d.margin);
  }
  const int64_t ties = static_cast<int64_t>(s.differences.size()) - r.selections_beyond_tie;
  printf("; near ties (reference margin <= %.0e) %lld", model::kSelectionNearTie, static_cast<long long>(ties));
  if (ties > 0) printf(" (largest margin %.2g)", largest_tie);
  printf(", beyond %lld\n", static_cast<long long>(r.selections_beyond_tie));
  // The first five differences, those beyond a near tie first.
  int shown = 0;
  for (const bool near : {false, true}) {
    for (const model::DecisionDifference& d : s.differences) {
      if ((d.margin <= model::kSelectionNearTie) != near) continue;
      if (shown++ == 5) return;
      printf("    %s at layer %lld, position %lld: reference margin %.3g%s\n", model::DecisionSiteName(d.site),
             static_cast<long long>(d.layer), static_cast<long long>(d.row), d.margin, near ? " (near tie)" : "");
    }
  }
}

void PrintResult(const GoldenPrompt& g, const GoldenResult& r, bool forced) {
  printf("%s: prompt %lld tokens, %zu generated, tokens %s, max |logit error| prefill %.3g decode %.3g", g.name.c_str(),
         static_cast<long long>(r.prompt_len), r.generated.size(), r.tokens_equal ? "equal" : "DIFFER",
         r.max_prefill_error, r.max_decode_error);
  if (forced) {
    printf(", near ties %lld (flipped %lld)", static_cast<long long>(r.near_ties),
           static_cast<long long>(r.near_tie_flips));
  }
  printf(": %s\n", r.passed ? "pass" : "FAIL");
  PrintSelections(r);
  if (!r.tokens_equal) {
    printf("  expected:");
    for (int32_t t : g.greedy) printf(" %d", t);
    printf("\n  got:     ");
    for (int32_t t : r.generated) printf(" %d", t);
    printf("\n");
  }
}

// --logits-out: every prompt's logits, float32, one after another.
bool WriteLogits(const std::string& path, const std::vector<float>& logits) {
  FILE* f = fopen(path.c_str(), "wb");
  const bool ok = f != nullptr && fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
  if (f != nullptr && fclose(f) != 0) return false;
  if (!ok) fprintf(stderr, "ferry check-golden: cannot write %s\n", path.c_str());
  return ok;
}

// --logits-against: this run's logits against another run's file; within 0 asks for the same bits.
bool CompareLogits(const std::string& path, const std::vector<float>& logits, double within) {
  std::vector<float> other;
  if (FILE* f = fopen(path.c_str(), "rb")) {
    float v;
    while (fread(&v, sizeof(float), 1, f) == 1) other.push_back(v);
    fclose(f);
  } else {
    printf("logits against %s: cannot read it: FAIL\n", path.c_str());
    return false;
  }
  if (other.size() != logits.size()) {
    printf("logits against %s: it holds %zu values, this run %zu: FAIL\n", path.c_str(), other.size(), logits.size());
    return false;
  }
  const bool same_bits = std::memcmp(other.data(), logits.data(), logits.size() * sizeof(float)) == 0;
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double d = std::fabs(static_cast<double>(logits[i]) - other[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  const bool ok = within > 0 ? worst <= within : same_bits;
  printf("logits against %s: %zu values, max |difference| %.3g, %s: %s\n", path.c_str(), logits.size(), worst,
         same_bits ? "bit-identical" : "not bit-identical", ok ? "pass" : "FAIL");
  return ok;
}

#ifdef FERRY_WITH_CUDA
// The pinned bf16 check's reports (RunPinnedBf16, CUDA builds only).
int64_t PicksEqual(const GoldenResult& r, const GoldenPrompt& g) {
  int64_t n = 0;
  for (size_t i = 0; i < r.generated.size() && i < g.greedy.size(); ++i) n += r.generated[i] == g.greedy[i] ? 1 : 0;
  return n;
}

// "median M, 90th percentile P" of the per-position errors.
std::string ErrorSpread(const GoldenResult& r) {
  std::vector<float> e = r.position_errors;
  if (e.empty()) return "no positions";
  std::sort(e.begin(), e.end());
  char buf[96];
  snprintf(buf, sizeof(buf), "by position median %.3g, 90th percentile %.3g", e[e.size() / 2], e[e.size() * 9 / 10]);
  return buf;
}

// Runs `check` with `log` attached to `m` in `mode`; detaches it after.
absl::StatusOr<GoldenResult> WithLog(model::CausalLM& m, DecisionLog& log, DecisionLog::Mode mode,
                                     const GoldenPrompt& g, float tol, int64_t chunk) {
  m.set_decision_log(&log);
  log.Start(mode);
  auto r = model::CheckGoldenPromptForced(m, g, tol, chunk);
  absl::Status fin = log.Finish();
  m.set_decision_log(nullptr);
  if (!r.ok()) return r.status();
  if (!fin.ok()) return fin;
  return r;
}

// --device cuda --precision bf16 with pinned decisions (model/golden/decision_log.h): the float32 CUDA
// run records each prompt's indexer and routing decisions and must itself pass at the float32
// tolerance; the bf16 run replays them and is held to `tol` (gated); the bf16 run without them
// is reported only, with how many decisions it changes.
int RunPinnedBf16(const std::string& dir, const std::vector<GoldenPrompt>& prompts, double tol_flag, int64_t chunk) {
  float tol = 0.0f, ref_tol = 0.0f;
  std::vector<DecisionLog> logs(prompts.size());
  int passed = 0, failed = 0;
  std::vector<bool> ref_ok(prompts.size(), false);
  {
    auto ref = LoadModelOn("cuda", dir, "f32");
    if (!ref.ok()) {
      fprintf(stderr, "ferry check-golden: %s\n", std::string(ref.status().message()).c_str());
      return 2;
    }
    const model::Family family = (*ref)->config().family;
    tol = static_cast<float>(GoldenTolerance("cuda", "bf16", family, tol_flag));
    ref_tol = static_cast<float>(GoldenTolerance("cuda", "f32", family, -1));
    printf("device cuda, precision bf16, tolerance %.3g logits, indexer top-k and MoE routing pinned to the "
           "float32 CUDA run (itself held to %.3g); teacher-forced continuation, tokens may differ only at golden "
           "margins <= tolerance\n",
           tol, ref_tol);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const GoldenPrompt& g = prompts[i];
      auto r = WithLog(**ref, logs[i], DecisionLog::Mode::kRecord, g, ref_tol, chunk);
      if (!r.ok()) {
        printf("%s f32 reference: error: %s\n", g.name.c_str(), std::string(r.status().message()).c_str());
        continue;
      }
      ref_ok[i] = r->passed;
      printf("%s f32 reference: max |logit error| prefill %.3g decode %.3g, %lld row decisions recorded: %s\n",
             g.name.c_str(), r->max_prefill_error, r->max_decode_error,
             static_cast<long long>(logs[i].stats().decisions), r->passed ? "pass" : "FAIL");
    }
  }  // the float32 weights are freed before the bf16 ones load
  auto m = LoadModelOn("cuda", dir, "bf16");
  if (!m.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(m.status().message()).c_str());
    return 2;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GoldenPrompt& g = prompts[i];
    if (logs[i].steps() == 0) {
      printf("%s: no recorded decisions (the float32 run failed): FAIL\n", g.name.c_str());
      ++failed;
      continue;
    }
    auto pinned = WithLog(**m, logs[i], DecisionLog::Mode::kReplay, g, tol, chunk);
    if (!pinned.ok()) {
      printf("%s: error: %s\n", g.name.c_str(), std::string(pinned.status().message()).c_str());
      ++failed;
      continue;
    }
    const DecisionStats pinned_stats = logs[i].stats();
    GoldenResult r = *pinned;
    r.passed = r.passed && ref_ok[i];  // the pins are only as good as the run they came from
    PrintResult(g, r, /*forced=*/true);
    printf("  pinned: |logit error| %s; bf16 alone would have decided otherwise at ", ErrorSpread(r).c_str());
    PrintDecisionStats(pinned_stats);
    printf("\n");
    auto free_run = WithLog(**m, logs[i], DecisionLog::Mode::kCompare, g, tol, chunk);
    if (free_run.ok()) {
      printf("  unpinned (reported): max |logit error| prefill %.3g decode %.3g, %s, greedy picks %lld of %zu equal; ",
             free_run->max_prefill_error, free_run->max_decode_error, ErrorSpread(*free_run).c_str(),
             static_cast<long long>(PicksEqual(*free_run, g)), g.greedy.size());
      PrintDecisionStats(logs[i].stats());
      printf("\n");
    } else {
      printf("  unpinned (reported): error: %s\n", std::string(free_run.status().message()).c_str());
    }
    (r.passed ? passed : failed)++;
  }
  printf("golden: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
#endif

// --server: every golden prompt through a running server's gRPC API, greedy, its tokens against
// the golden's. A token may differ only where the golden's top-1/top-2 margin is within
// `tolerance` (later ones then follow another prefix and are not compared).
int RunCheckGoldenRemote(const std::string& address, const std::vector<GoldenPrompt>& prompts, double tolerance) {
  printf("server %s, greedy through the gRPC API; a token may differ only at a golden margin <= %.3g\n",
         address.c_str(), tolerance);
  int passed = 0, failed = 0;
  for (const GoldenPrompt& g : prompts) {
    ferry::v1::GenerateRequest req;
    req.mutable_prompt_token_ids()->Add(g.ids.begin(), g.ids.end());
    ferry::v1::SamplingParams* sp = req.mutable_sampling();
    sp->set_temperature(0);
    sp->set_max_tokens(static_cast<int32_t>(g.greedy.size()));
    sp->set_ignore_eos(true);
    auto fin = GenerateRemote(address, req, std::chrono::minutes(5), [](const ferry::v1::TokenChunk&) {});
    if (!fin.ok()) {
      printf("%s: error: %s\n", g.name.c_str(), std::string(fin.status().message()).c_str());
      ++failed;
      continue;
    }
    if (fin->finish_reason() == ferry::v1::FINISH_REASON_ERROR || fin->finish_reason() == ferry::v1::FINISH_REASON_ABORT) {
      printf("%s: the request ended with %s: %s: FAIL\n", g.name.c_str(),
             fin->finish_reason() == ferry::v1::FINISH_REASON_ERROR ? "ERROR" : "ABORT", fin->error().c_str());
      ++failed;
      continue;
    }
    const std::vector<int32_t> got(fin->token_ids().begin(), fin->token_ids().end());
    size_t first = 0;
    while (first < got.size() && first < g.greedy.size() && got[first] == g.greedy[first]) ++first;
    bool ok = got.size() == g.greedy.size() && first == got.size();
    std::string why;
    if (!ok && first < got.size() && first < g.greedy.size()) {
      // The margin of the golden's logits that chose token `first`.
      const float* ref = g.logits.data() + (g.ids.size() - 1 + first) * static_cast<size_t>(g.vocab);
      float top = -INFINITY, second = -INFINITY;
      for (int64_t v = 0; v < g.vocab; ++v) {
        if (ref[v] > top) {
          second = top;
          top = ref[v];
        } else {
          second = std::max(second, ref[v]);
        }
      }
      ok = top - second <= tolerance;
      char buf[128];
      snprintf(buf, sizeof(buf), ", first difference at token %zu, golden margin %.3g%s", first, top - second,
               ok ? " (a near tie)" : "");
      why = buf;
    }
    printf("%s: prompt %zu tokens, %zu generated, tokens %s%s: %s\n", g.name.c_str(), g.ids.size(), got.size(),
           first == got.size() && got.size() == g.greedy.size() ? "equal" : "DIFFER", why.c_str(), ok ? "pass" : "FAIL");
    if (first != got.size() || got.size() != g.greedy.size()) {
      printf("  expected:");
      for (int32_t t : g.greedy) printf(" %d", t);
      printf("\n  got:     ");
      for (int32_t t : got) printf(" %d", t);
      printf("\n");
    }
    (ok ? passed : failed)++;
  }
  printf("golden: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

// cpu: the float32 backend must reproduce transformers' greedy tokens exactly and its logits
// within 1e-3 (model::CheckGoldenPrompt). cuda: teacher-forced (model::CheckGoldenPromptForced):
// a token may differ only where the golden's top-1/top-2 margin is within the tolerance. A golden
// that records the reference's selections has them replayed on every device and precision
// (model::CheckGoldenPinned; float32 runs fail an own choice that differs beyond a near tie);
// without them cuda bf16 pins the discrete decisions to the float32 CUDA run's (RunPinnedBf16;
// bench/results/h200-check-golden-cuda.md says why). --pin-decisions=false: no pinning.
int RunCheckGolden() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty() && (absl::GetFlag(FLAGS_server).empty() || absl::GetFlag(FLAGS_golden).empty())) {
    fprintf(stderr, "ferry check-golden: --model DIR is required (with --server, --golden FILE will do)\n");
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::string precision = device == "cpu" ? "f32" : absl::GetFlag(FLAGS_precision);
  std::string golden_path = absl::GetFlag(FLAGS_golden);
  if (golden_path.empty()) golden_path = dir + "/golden.safetensors";
  const bool forced = device != "cpu";
  const int64_t chunk = absl::GetFlag(FLAGS_prefill_chunk);

  auto prompts = model::ReadGolden(golden_path);
  if (!prompts.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(prompts.status().message()).c_str());
    return 2;
  }
  if (const std::string server = absl::GetFlag(FLAGS_server); !server.empty()) {
    const double tol = absl::GetFlag(FLAGS_tolerance);
    return RunCheckGoldenRemote(server, *prompts, tol >= 0 ? tol : 1e-3);
  }
  const int64_t world = absl::GetFlag(FLAGS_ranks);
  const std::string split = absl::GetFlag(FLAGS_owner_split);
  if (world < 1 || world > 64) {
    fprintf(stderr, "ferry check-golden: --ranks %lld: need 1 to 64\n", static_cast<long long>(world));
    return 2;
  }
  if (absl::Status st = CheckDataPlane(absl::GetFlag(FLAGS_dataplane), device); !st.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (split != "auto" && split != "on" && split != "off") {
    fprintf(stderr, "ferry check-golden: --owner-split %s: use auto, on or off\n", split.c_str());
    return 2;
  }
  const bool owner_split = split == "on" && world > 1;
  const bool pin = absl::GetFlag(FLAGS_pin_decisions);
  bool reference_selections = false;
  for (const GoldenPrompt& g : *prompts) reference_selections = reference_selections || !g.selections.empty();
  reference_selections = reference_selections && pin;
#ifdef FERRY_WITH_CUDA
  const bool pinned = device == "cuda" && precision == "bf16" && pin && !reference_selections;
  if (pinned && world > 1) {
    fprintf(stderr, "ferry check-golden: the pinned bf16 check runs one rank; with --ranks %lld pass "
                    "--pin-decisions=false (and compare the ranks' logits with --logits-against)\n",
            static_cast<long long>(world));
    return 2;
  }
  if (pinned) return RunPinnedBf16(dir, *prompts, absl::GetFlag(FLAGS_tolerance), chunk);
#endif
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_step_timeout) * 1000));
  return dataplane::RunProcessGroup(static_cast<int>(world), timeout, [&](int rank, model::Collective* comm) {
    // Every rank runs the same prompts in lockstep; rank 0 reports.
    FILE* report = rank == 0 ? stdout : fopen("/dev/null", "w");
#ifdef FERRY_WITH_CUDA
    // On GPUs (rank modulo the visible ones), the ranks reduce over NCCL when --dataplane gives it.
    std::unique_ptr<model::Collective> device_comm;
    if (device == "cuda") {
      const int gpus = kernels::cuda::DeviceCount();
      absl::Status st = world > 1 ? kernels::cuda::UseDevice(gpus > 0 ? rank % gpus : 0) : absl::OkStatus();
      absl::StatusOr<std::string> plane =
          st.ok() ? dataplane::ResolveDeviceDataPlane(absl::GetFlag(FLAGS_dataplane), comm, rank, static_cast<int>(world))
                  : absl::StatusOr<std::string>(st);
      auto made = plane.ok() ? dataplane::DeviceCollective(*plane, comm, rank, static_cast<int>(world), timeout)
                             : absl::StatusOr<std::unique_ptr<model::Collective>>(plane.status());
      if (!made.ok()) {
        fprintf(stderr, "ferry check-golden: rank %d: %s\n", rank, std::string(made.status().message()).c_str());
        return 2;
      }
      device_comm = std::move(*made);
      if (device_comm) comm = device_comm.get();
      if (rank == 0 && (world > 1 || device_comm)) fprintf(report, "data plane %s; ", plane->c_str());
    }
#endif
    auto model = LoadModelOn(device, dir, precision, /*fp8_experts=*/true,
                             model::TensorParallel{rank, static_cast<int>(world), comm}, /*nvfp4_experts=*/true,
                             absl::GetFlag(FLAGS_nvfp4_numerics));
    if (!model.ok()) {
      fprintf(stderr, "ferry check-golden: rank %d: %s\n", rank, std::string(model.status().message()).c_str());
      return 2;
    }
    const float tol = static_cast<float>(
        GoldenTolerance(device, precision, (*model)->config().family, absl::GetFlag(FLAGS_tolerance)));
    fprintf(report, "device %s, precision %s, tolerance %.3g logits%s", device.c_str(), precision.c_str(), tol,
            forced ? " (teacher-forced continuation; tokens may differ only at golden margins <= tolerance)" : "");
    if (world > 1) {
      fprintf(report, ", %lld ranks, owner split %s", static_cast<long long>(world), owner_split ? "on" : "off");
    }
    if (reference_selections) {
      fprintf(report, "; indexer top-k and MoE routing pinned to the reference's selections%s",
              precision == "f32" ? ", an own choice that differs beyond a near tie fails" : "");
    }
    fprintf(report, "\n");
    int passed = 0, failed = 0;
    std::vector<float> logits;
    for (size_t i = 0; i < prompts->size(); ++i) {
      const GoldenPrompt& g = (*prompts)[i];
      const int owner = owner_split ? static_cast<int>(i % static_cast<size_t>(world)) : -1;
      auto r = reference_selections
                   ? model::CheckGoldenPinned(**model, g, tol, forced, /*gate_selections=*/precision == "f32", chunk, owner)
                   : forced ? model::CheckGoldenPromptForced(**model, g, tol, chunk, owner)
                            : model::CheckGoldenPrompt(**model, g, tol, chunk, owner);
      if (!r.ok()) {
        fprintf(report, "%s: error: %s\n", g.name.c_str(), std::string(r.status().message()).c_str());
        if (rank != 0) fprintf(stderr, "rank %d: %s: %s\n", rank, g.name.c_str(), std::string(r.status().message()).c_str());
        ++failed;
        continue;
      }
      if (rank == 0) PrintResult(g, *r, forced);
      logits.insert(logits.end(), r->logits.begin(), r->logits.end());
      (r->passed ? passed : failed)++;
    }
    fprintf(report, "golden: %d passed, %d failed\n", passed, failed);
    if (rank != 0) {
      fclose(report);
      return 0;  // rank 0 judges the run (a rank's own error fails it above, in the collectives)
    }
    int rc = failed == 0 ? 0 : 1;
    if (!absl::GetFlag(FLAGS_logits_out).empty() && !WriteLogits(absl::GetFlag(FLAGS_logits_out), logits)) rc = 1;
    if (!absl::GetFlag(FLAGS_logits_against).empty() &&
        !CompareLogits(absl::GetFlag(FLAGS_logits_against), logits, absl::GetFlag(FLAGS_logits_within))) {
      rc = 1;
    }
    return rc;
  });
}

}  // namespace ferry::cli
