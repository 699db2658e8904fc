#include "model/golden/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/families/generate.h"
#include "model/checkpoint/safetensors.h"

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

// `pK.select.L.<site>` and `pK.select.L.<site>_margin`: the prompt's selections, by layer then
// site. `rows` = prompt + greedy positions.
absl::StatusOr<std::vector<GoldenSelection>> ReadSelections(const SafetensorsFile& f, const std::string& p,
                                                            int64_t rows) {
  const std::string prefix = p + ".select.";
  std::map<std::pair<int64_t, int>, GoldenSelection> found;
  for (const TensorInfo& t : f.tensors()) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    const std::vector<std::string> parts = absl::StrSplit(t.name.substr(prefix.size()), '.');
    int64_t layer = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &layer) || layer < 0) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", t.name, "' is not ", prefix, "LAYER.SITE"));
    }
    const bool margin = absl::EndsWith(parts[1], "_margin");
    const std::string site_name = margin ? parts[1].substr(0, parts[1].size() - 7) : parts[1];
    DecisionSite site;
    if (site_name == "indexer") {
      site = DecisionSite::kIndexerTopK;
    } else if (site_name == "experts") {
      site = DecisionSite::kMoeExperts;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", t.name, "': unknown decision site '", site_name,
                                                     "' (indexer or experts)"));
    }
    GoldenSelection& sel = found[{layer, static_cast<int>(site)}];
    sel.site = site;
    sel.layer = layer;
    if (margin) {
      if (t.dtype != DType::kF32 || t.shape.size() != 1 || t.shape[0] != rows) {
        return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", t.name, "' is ", DTypeName(t.dtype), " ",
                                                       t.ShapeString(), "; expected F32 [", rows, "]"));
      }
      sel.margins.resize(static_cast<size_t>(rows));
      std::memcpy(sel.margins.data(), f.Data(t), sel.margins.size() * sizeof(float));
    } else {
      if (t.dtype != DType::kI32 || t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] < 1) {
        return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", t.name, "' is ", DTypeName(t.dtype), " ",
                                                       t.ShapeString(), "; expected I32 [", rows, ", width]"));
      }
      sel.width = t.shape[1];
      sel.ids.resize(static_cast<size_t>(t.numel()));
      std::memcpy(sel.ids.data(), f.Data(t), sel.ids.size() * sizeof(int32_t));
    }
  }
  std::vector<GoldenSelection> out;
  for (auto& [key, sel] : found) {
    const std::string name = absl::StrCat(prefix, sel.layer, ".", sel.site == DecisionSite::kIndexerTopK ? "indexer" : "experts");
    if (sel.ids.empty() || sel.margins.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": '", name, "' needs both its ids and '", name,
                                                     "_margin'"));
    }
    out.push_back(std::move(sel));
  }
  return out;
}

// Whether row `t`'s ids are ascending, -1 only after the last id, and each allowed by `fits`.
template <typename Fits>
absl::Status CheckRow(const std::string& what, int64_t t, const int32_t* ids, int64_t width, Fits fits) {
  bool padding = false;
  for (int64_t j = 0; j < width; ++j) {
    const int32_t id = ids[j];
    if (id == -1) {
      padding = true;
      continue;
    }
    const char* wrong = padding                  ? "follows the -1 padding"
                        : id < -1                ? "is negative"
                        : j > 0 && id <= ids[j - 1] ? "is not above the id before it"
                        : !fits(id)               ? "cannot be chosen there"
                                                  : nullptr;
    if (wrong != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": position ", t, " slot ", j, ": id ", id, " ", wrong));
    }
  }
  return absl::OkStatus();
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
    FERRY_ASSIGN_OR_RETURN(g.selections, ReadSelections(f, p, rows));
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

absl::StatusOr<DecisionLog> ReferenceTape(const ModelConfig& c, const GoldenPrompt& golden) {
  const int64_t n = static_cast<int64_t>(golden.ids.size());
  const int64_t rows = n + static_cast<int64_t>(golden.greedy.size());
  const int64_t kpool = c.family == Family::kGlm5Next ? std::max<int64_t>(c.index_kpool, 1) : 1;
  DecisionLog tape;
  tape.Start(DecisionLog::Mode::kRecord);
  FERRY_RETURN_IF_ERROR(tape.BeginStep(rows));
  size_t next = 0;  // the golden's next selection; the model's sites come in forward order
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool indexer = c.layer_types[l] == AttentionType::kMla && c.indexer_types[l] == IndexerType::kFull;
    const bool experts = c.mlp_types[l] == MlpType::kSparse;
    for (const DecisionSite site : {DecisionSite::kIndexerTopK, DecisionSite::kMoeExperts}) {
      if (!(site == DecisionSite::kIndexerTopK ? indexer : experts)) continue;
      const std::string what =
          absl::StrCat(golden.name, ".select.", l, site == DecisionSite::kIndexerTopK ? ".indexer" : ".experts");
      if (next >= golden.selections.size() || golden.selections[next].layer != l ||
          golden.selections[next].site != site) {
        return absl::InvalidArgumentError(absl::StrCat("the golden has no '", what, "' (this model makes that choice; ",
                                                       golden.selections.size(), " selections given)"));
      }
      const GoldenSelection& sel = golden.selections[next++];
      const int64_t width = site == DecisionSite::kMoeExperts ? c.num_experts_per_tok : c.index_topk / kpool;
      if (sel.width != width) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", what, "' is ", sel.width, " wide; this model chooses ", width,
                         site == DecisionSite::kMoeExperts ? " experts" : kpool > 1 ? " pools" : " tokens", " a row"));
      }
      for (int64_t t = 0; t < rows; ++t) {
        const int32_t* row = sel.ids.data() + t * width;
        if (site == DecisionSite::kMoeExperts) {
          FERRY_RETURN_IF_ERROR(CheckRow(what, t, row, width, [&](int32_t e) { return e < c.n_routed_experts; }));
          if (row[width - 1] < 0) {
            return absl::InvalidArgumentError(absl::StrCat(what, ": position ", t, " routes to fewer than ", width,
                                                           " experts"));
          }
        } else {
          // A token at or before the row's own position; a pool whose last token is.
          FERRY_RETURN_IF_ERROR(CheckRow(what, t, row, width, [&](int32_t id) { return (id + 1) * kpool - 1 <= t; }));
        }
      }
      FERRY_RETURN_IF_ERROR(tape.Append(site, l, width, sel.ids, sel.margins));
    }
  }
  if (next != golden.selections.size()) {
    const GoldenSelection& extra = golden.selections[next];
    return absl::InvalidArgumentError(absl::StrCat(golden.name, ": the golden holds a ", DecisionSiteName(extra.site),
                                                   " selection at layer ", extra.layer,
                                                   ", which this model does not make there"));
  }
  FERRY_RETURN_IF_ERROR(tape.Finish());
  return tape;
}

std::vector<DecisionLog::RowRange> GoldenSteps(const GoldenPrompt& golden, int64_t prefill_chunk) {
  const int64_t n = static_cast<int64_t>(golden.ids.size());
  const int64_t rows = n + static_cast<int64_t>(golden.greedy.size());
  const int64_t chunk = prefill_chunk > 0 ? prefill_chunk : std::max<int64_t>(n, 1);
  std::vector<DecisionLog::RowRange> steps;
  for (int64_t start = 0; start < n; start += chunk) steps.push_back({start, std::min(chunk, n - start)});
  for (int64_t t = n; t < rows; ++t) steps.push_back({t, 1});
  return steps;
}

absl::StatusOr<GoldenResult> CheckGoldenPinned(CausalLM& model, const GoldenPrompt& golden, float tolerance,
                                               bool forced, bool gate_selections, int64_t prefill_chunk,
                                               int latent_owner) {
  auto check = [&]() {
    return forced ? CheckGoldenPromptForced(model, golden, tolerance, prefill_chunk, latent_owner)
                  : CheckGoldenPrompt(model, golden, tolerance, prefill_chunk, latent_owner);
  };
  if (golden.selections.empty()) return check();
  FERRY_ASSIGN_OR_RETURN(const DecisionLog whole, ReferenceTape(model.config(), golden));
  FERRY_ASSIGN_OR_RETURN(DecisionLog tape, whole.Recut(GoldenSteps(golden, prefill_chunk)));
  tape.Start(DecisionLog::Mode::kReplay);
  model.set_decision_log(&tape);
  absl::StatusOr<GoldenResult> r = check();
  const absl::Status finished = tape.Finish();
  model.set_decision_log(nullptr);
  if (!r.ok()) return r.status();
  FERRY_RETURN_IF_ERROR(finished);
  r->pinned = true;
  r->selections = tape.stats();
  for (const DecisionDifference& d : r->selections.differences) {
    r->selections_beyond_tie += d.margin <= kSelectionNearTie ? 0 : 1;  // an unknown (NaN) margin excuses nothing
  }
  if (gate_selections) r->passed = r->passed && r->selections_beyond_tie == 0;
  return r;
}

double PinnedBf16Tolerance(Family family) { return family == Family::kGlm5Next ? 1.5 : 0.5; }

}  // namespace ferry::model
