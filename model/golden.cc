#include "model/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/generate.h"
#include "model/safetensors.h"

namespace ferry::model {
namespace {

absl::StatusOr<std::vector<int32_t>> ReadI32(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(f.path(), ": tensor '", name, "' is missing"));
  if (t->dtype != DType::kI32 || t->shape.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", name, "' is ", DTypeName(t->dtype), " ",
                                                   t->ShapeString(), "; expected I32 [n]"));
  }
  std::vector<int32_t> v(static_cast<size_t>(t->numel()));
  std::memcpy(v.data(), f.Data(*t), v.size() * sizeof(int32_t));
  return v;
}

}  // namespace

absl::StatusOr<std::vector<GoldenPrompt>> ReadGolden(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  std::vector<GoldenPrompt> out;
  for (int k = 0;; ++k) {
    const std::string p = absl::StrCat("p", k);
    if (f.Find(p + ".ids") == nullptr) break;
    GoldenPrompt g;
    g.name = p;
    FERRY_ASSIGN_OR_RETURN(g.ids, ReadI32(f, p + ".ids"));
    FERRY_ASSIGN_OR_RETURN(g.greedy, ReadI32(f, p + ".greedy"));
    const TensorInfo* lt = f.Find(p + ".logits");
    const int64_t rows = static_cast<int64_t>(g.ids.size() + g.greedy.size());
    if (lt == nullptr || lt->dtype != DType::kF32 || lt->shape.size() != 2 || lt->shape[0] != rows) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": '", p, ".logits' must be F32 [", rows,
                                                     ", vocab]"));
    }
    g.vocab = lt->shape[1];
    g.logits.resize(static_cast<size_t>(lt->numel()));
    std::memcpy(g.logits.data(), f.Data(*lt), g.logits.size() * sizeof(float));
    out.push_back(std::move(g));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no prompt p0"));
  return out;
}

absl::StatusOr<GoldenResult> CheckGoldenPrompt(CausalLM& model, const GoldenPrompt& golden,
                                               float tolerance, int64_t prefill_chunk, int latent_owner) {
  const int64_t vocab = model.config().vocab_size;
  if (golden.vocab != vocab) {
    return absl::InvalidArgumentError(absl::StrCat(golden.name, ": golden vocab ", golden.vocab,
                                                   " differs from the model's ", vocab));
  }
  GenerateOptions opt;
  opt.max_tokens = static_cast<int64_t>(golden.greedy.size());
  opt.ignore_eos = true;
  opt.prefill_chunk = prefill_chunk;
  opt.latent_owner = latent_owner;
  FERRY_ASSIGN_OR_RETURN(GenerateResult gen, Generate(model, golden.ids, opt, /*keep_logits=*/true));

  GoldenResult r;
  r.name = golden.name;
  r.prompt_len = static_cast<int64_t>(golden.ids.size());
  r.generated = gen.tokens;
  r.tokens_equal = gen.tokens == golden.greedy;
  // Positions after the first token mismatch saw a different prefix: compare up to it.
  size_t rows = std::min(gen.logits.size(), golden.logits.size()) / static_cast<size_t>(vocab);
  for (size_t i = 0; i < std::min(gen.tokens.size(), golden.greedy.size()); ++i) {
    if (gen.tokens[i] != golden.greedy[i]) {
      rows = std::min(rows, golden.ids.size() + i);
      break;
    }
  }
  for (size_t i = 0; i < rows; ++i) {
    float err = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) {
      const float d = std::fabs(gen.logits[i * vocab + v] - golden.logits[i * vocab + v]);
      err = std::isnan(d) ? INFINITY : std::max(err, d);
    }
    float& slot = static_cast<int64_t>(i) < r.prompt_len ? r.max_prefill_error : r.max_decode_error;
    slot = std::max(slot, err);
    r.position_errors.push_back(err);
  }
  r.passed = r.tokens_equal && r.max_prefill_error <= tolerance && r.max_decode_error <= tolerance;
  r.logits = std::move(gen.logits);
  return r;
}

absl::StatusOr<GoldenResult> CheckGoldenPromptForced(CausalLM& model, const GoldenPrompt& golden, float tolerance,
                                                     int64_t prefill_chunk, int latent_owner) {
  const int64_t vocab = model.config().vocab_size;
  if (golden.vocab != vocab) {
    return absl::InvalidArgumentError(absl::StrCat(golden.name, ": golden vocab ", golden.vocab,
                                                   " differs from the model's ", vocab));
  }
  if (golden.ids.empty()) return absl::InvalidArgumentError(absl::StrCat(golden.name, ": the prompt is empty"));
  std::unique_ptr<SequenceState> seq = model.NewSequence();
  if (latent_owner >= 0) FERRY_RETURN_IF_ERROR(seq->SetLatentOwner(latent_owner, /*borrowed=*/false));
  std::vector<float> logits;
  const int64_t n = static_cast<int64_t>(golden.ids.size());
  const int64_t chunk = prefill_chunk > 0 ? prefill_chunk : n;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    ForwardSegment seg{seq.get(), std::span<const int32_t>(golden.ids.data() + start, static_cast<size_t>(len)), true};
    FERRY_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(std::span<const ForwardSegment>(&seg, 1)));
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  // Every golden token goes through the decode path, the last one too (its logits are compared).
  for (const int32_t& tok : golden.greedy) {
    ForwardSegment seg{seq.get(), std::span<const int32_t>(&tok, 1), false};
    FERRY_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(std::span<const ForwardSegment>(&seg, 1)));
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  GoldenResult r;
  r.name = golden.name;
  r.prompt_len = n;
  const size_t rows = std::min(logits.size(), golden.logits.size()) / static_cast<size_t>(vocab);
  for (size_t i = 0; i < rows; ++i) {
    float err = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) {
      const float d = std::fabs(logits[i * vocab + v] - golden.logits[i * vocab + v]);
      err = std::isnan(d) ? INFINITY : std::max(err, d);
    }
    float& slot = static_cast<int64_t>(i) < r.prompt_len ? r.max_prefill_error : r.max_decode_error;
    slot = std::max(slot, err);
    r.position_errors.push_back(err);
  }
  bool picks_ok = true;
  for (size_t g = 0; g < golden.greedy.size(); ++g) {
    const size_t row = static_cast<size_t>(n) - 1 + g;  // the logits that chose golden token g
    const float* own = logits.data() + row * vocab;
    const float* ref = golden.logits.data() + row * vocab;
    const int32_t pick = kernels::cpu::ArgMax(own, vocab);
    r.generated.push_back(pick);
    const int32_t top1 = kernels::cpu::ArgMax(ref, vocab);
    float second = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      if (v != top1) second = std::max(second, ref[v]);
    }
    const bool near_tie = ref[top1] - second <= tolerance;
    r.near_ties += near_tie ? 1 : 0;
    if (pick != golden.greedy[g]) {
      if (near_tie) {
        ++r.near_tie_flips;
      } else {
        picks_ok = false;
      }
    }
  }
  r.tokens_equal = r.generated == golden.greedy;
  r.passed = picks_ok && r.max_prefill_error <= tolerance && r.max_decode_error <= tolerance;
  r.logits = std::move(logits);
  return r;
}

double PinnedBf16Tolerance(Family family) { return family == Family::kGlm5Next ? 1.5 : 0.5; }

}  // namespace ferry::model
