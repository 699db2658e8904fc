// `ferry plan`: a rank's memory for a model and a TP width, without loading weights: only
// config.json is read (and, with --model DIR, its hf_quant_config.json). The weights a rank
// holds follow from the config (model/checkpoint/weight_bytes.h); the room left for KV is either
// given (--room-gib, what a worker would report) or what --memory-gib leaves after --reserve-gib
// and the weights; the KV memory plan (kvpool/plan.h) then splits the room. So a deployment can
// be sized before it is started.
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "kvpool/bytes_per_token.h"
#include "kvpool/plan.h"
#include "model/cache/kv_bytes.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/weight_bytes.h"

namespace ferry::cli {
namespace {

// A GB10 (DGX Spark) keeps back from its 128 GiB: what Linux does not see (121.7 GiB visible),
// what CUDA cannot allocate at boot (about 102 GiB can be, on a headless box with caches
// dropped), and 2 GiB of the engine's workspace.
constexpr double kDefaultReserveGib = 28;

int Fail(int code, const std::string& message) {
  fflush(stdout);  // what was printed comes before the refusal, also through a pipe
  fprintf(stderr, "ferry plan: %s\n", message.c_str());
  return code;
}

// Exit status for a refusal: 1 when the model does not fit, 2 for bad input.
int FailWith(const absl::Status& s) {
  return Fail(s.code() == absl::StatusCode::kResourceExhausted ? 1 : 2, std::string(s.message()));
}

// GiB or MiB from a flag to bytes. False when negative, not finite, or past 1 PiB.
bool ToBytes(double value, int64_t unit, int64_t* bytes) {
  if (!std::isfinite(value) || value < 0 ||
      value * static_cast<double>(unit) > static_cast<double>(kvpool::kMaxRoomBytes)) {
    return false;
  }
  *bytes = std::llround(value * static_cast<double>(unit));
  return true;
}

// The room a rank has for KV: --room-gib as given, or --memory-gib less --reserve-gib and the
// weights (then `source` gets a line saying so). Giving both is refused unless they agree to
// the hundredth of a GiB the plan prints.
absl::StatusOr<int64_t> ChooseRoom(const absl::StatusOr<model::WeightBytes>& weights, std::string* source) {
  const double room_gib = absl::GetFlag(FLAGS_room_gib), memory_gib = absl::GetFlag(FLAGS_memory_gib);
  double reserve_gib = absl::GetFlag(FLAGS_reserve_gib);
  const bool room_given = !(room_gib < 0 && std::isfinite(room_gib)), memory_given = memory_gib != 0;
  const bool reserve_given = !(reserve_gib == -1);
  if (!room_given && !memory_given) {
    return absl::InvalidArgumentError(
        "give --memory-gib G (a rank's device memory; the weights and --reserve-gib come off it) or --room-gib G "
        "(the GiB a rank has left for KV after its weights and workspace, the smallest rank's)");
  }
  if (!memory_given) {
    if (reserve_given) {
      return absl::InvalidArgumentError(absl::StrCat("--reserve-gib ", reserve_gib,
                                                     " comes off --memory-gib, which is not given (--room-gib ",
                                                     room_gib, " is the room itself)"));
    }
    int64_t room = 0;
    if (!ToBytes(room_gib, kvpool::kGiB, &room)) {
      return absl::InvalidArgumentError(absl::StrCat("--room-gib is ", room_gib, "; use 0 to 1048576 GiB"));
    }
    return room;
  }
  if (!weights.ok()) return weights.status();
  const int64_t weight_bytes = weights->bytes;
  if (!reserve_given) reserve_gib = kDefaultReserveGib;
  int64_t memory = 0, reserve = 0;
  if (!ToBytes(memory_gib, kvpool::kGiB, &memory) || memory == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--memory-gib is ", memory_gib, "; use more than 0 GiB"));
  }
  if (!ToBytes(reserve_gib, kvpool::kGiB, &reserve)) {
    return absl::InvalidArgumentError(absl::StrCat("--reserve-gib is ", reserve_gib, "; use 0 GiB or more"));
  }
  auto room = kvpool::RoomFromMemory(memory, reserve, weight_bytes);
  if (!room.ok()) return room.status();
  if (room_given) {
    int64_t given = 0;
    if (!ToBytes(room_gib, kvpool::kGiB, &given) ||
        std::llabs(given - *room) > kvpool::kGiB / 200) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--room-gib ", room_gib, " and --memory-gib ", memory_gib, " disagree: ", kvpool::FormatGiB(memory),
          " GiB less the ", kvpool::FormatGiB(reserve), " GiB reserve and ", kvpool::FormatGiB(weight_bytes),
          " GiB of weights leaves ", kvpool::FormatGiB(*room), " GiB; give one of them"));
    }
  }
  *source = absl::StrCat("memory a rank: ", kvpool::FormatGiB(memory), " GiB - ", kvpool::FormatGiB(reserve),
                         " GiB reserve (", reserve_given ? "--reserve-gib" : "default: OS, runtime, workspace",
                         ") - ", kvpool::FormatGiB(weight_bytes), " GiB weights = ", kvpool::FormatGiB(*room),
                         " GiB room (serve --memory-gib ", kvpool::FormatGiB(memory - reserve), ")\n");
  return *room;
}

// The model, its weights' formats and what a rank holds of them.
void PrintWeights(const model::ModelConfig& config, const std::string& path, const model::QuantizationScheme& scheme,
                  const absl::StatusOr<model::WeightBytes>& weights) {
  printf("model: %s (%s)\n", model::FamilyName(config.family), path.c_str());
  if (!weights.ok()) {
    printf("weights: %s; not counted: %s\n", scheme.Describe().c_str(), std::string(weights.status().message()).c_str());
    return;
  }
  const model::WeightBytes& w = *weights;
  printf("weights: %s; tensors:", scheme.Describe().c_str());
  for (int f = 0; f < model::kWeightFormats; ++f) {
    if (w.tensors[f] > 0) {
      printf(" %lld %s (%s GiB)", static_cast<long long>(w.tensors[f]),
             model::WeightFormatName(static_cast<model::WeightFormat>(f)), kvpool::FormatGiB(w.format_bytes[f]).c_str());
    }
  }
  printf("; no vision tower, no MTP layer (the engine loads neither)\n");
  printf("weights a rank: %s GiB (%lld bytes, %s GiB of them replicated on every rank)\n",
         kvpool::FormatGiB(w.bytes).c_str(), static_cast<long long>(w.bytes),
         kvpool::FormatGiB(w.replicated_bytes).c_str());
}

}  // namespace

int RunPlan() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  const std::string config_flag = absl::GetFlag(FLAGS_config);
  if (dir.empty() == config_flag.empty()) {
    return Fail(2, "give --model DIR (its config.json is read) or --config FILE, one of them");
  }
  const std::string path = config_flag.empty() ? dir + "/config.json" : config_flag;
  auto json = model::ReadJsonFile(path);
  if (!json.ok()) return Fail(2, std::string(json.status().message()));
  auto config = model::ParseModelConfig(*json, path);
  if (!config.ok()) return Fail(2, std::string(config.status().message()));
  // ModelOpt's older releases describe the quantization in hf_quant_config.json only.
  nlohmann::json hf_quant;
  if (!dir.empty()) {
    if (auto hq = model::ReadJsonFile(dir + "/hf_quant_config.json"); hq.ok()) {
      hf_quant = *hq;
    } else if (hq.status().code() != absl::StatusCode::kNotFound) {
      return Fail(2, std::string(hq.status().message()));
    }
  }

  const int64_t ranks = absl::GetFlag(FLAGS_ranks);
  auto mode = kvpool::ParseKvPages(absl::GetFlag(FLAGS_kv_pages));
  if (!mode.ok()) return Fail(2, std::string(mode.status().message()));
  auto dtype = kvpool::ParseCacheDtype(absl::GetFlag(FLAGS_kv_cache));
  if (!dtype.ok()) return Fail(2, std::string(dtype.status().message()));
  auto layout = kvpool::ResolveLayout(*mode, ranks, *dtype);
  if (!layout.ok()) return Fail(2, std::string(layout.status().message()));
  auto bpt = model::BytesPerTokenPerRank(*config, *dtype, absl::GetFlag(FLAGS_mtp_layers));
  if (!bpt.ok()) return Fail(2, std::string(bpt.status().message()));

  // The weights a rank holds, in the formats the config declares.
  auto scheme = model::QuantizationScheme::Parse(model::QuantizationScheme::Block(*json, hf_quant), path);
  if (!scheme.ok()) return Fail(2, std::string(scheme.status().message()));
  // Without them only --memory-gib is refused: a room given outright needs no weights.
  const absl::StatusOr<model::WeightBytes> weights = model::WeightBytesPerRank(*config, *scheme, ranks);

  kvpool::PlanInput in;
  in.layout = *layout;
  in.bytes_per_token = *bpt;
  in.page_size = absl::GetFlag(FLAGS_page_size);
  in.lanes = absl::GetFlag(FLAGS_parallel) > 0 ? absl::GetFlag(FLAGS_parallel) : 1;
  in.context = absl::GetFlag(FLAGS_context);
  auto split = kvpool::ParseOwnerSplit(absl::GetFlag(FLAGS_owner_split));
  if (!split.ok()) return Fail(2, std::string(split.status().message()));
  // Both families have MLA latent rows to split.
  in.split_ranks = kvpool::ResolveOwnerSplit(*split, ranks, *layout, /*model_splits=*/true) ? ranks : 1;
  if (in.context == 0) in.context = config->max_position_embeddings;
  PrintWeights(*config, path, *scheme, weights);
  std::string room_source;
  auto room = ChooseRoom(weights, &room_source);
  if (!room.ok()) return FailWith(room.status());
  printf("%s", room_source.c_str());
  in.room_bytes = *room;
  const double cache_gib = absl::GetFlag(FLAGS_prompt_cache_gib);
  if (!ToBytes(cache_gib, kvpool::kGiB, &in.cache_budget_bytes)) {
    return Fail(2, absl::StrCat("--prompt-cache-gib is ", cache_gib, "; use 0 to 1048576 GiB"));
  }
  const double fixed_mib = absl::GetFlag(FLAGS_fixed_mib);
  std::string fixed_source;
  if (fixed_mib < 0 && std::isfinite(fixed_mib)) {
    auto fixed = model::FixedBytesPerStreamPerRank(*config, ranks);
    if (!fixed.ok()) return Fail(2, std::string(fixed.status().message()));
    in.fixed_bytes = *fixed;
    fixed_source = config->has_linear_attention()
                       ? absl::StrCat("KDA state over ", ranks, ranks == 1 ? " rank" : " ranks")
                       : "no linear-attention state";
  } else {
    if (!ToBytes(fixed_mib, kvpool::kMiB, &in.fixed_bytes)) {
      return Fail(2, absl::StrCat("--fixed-mib is ", fixed_mib, "; use 0 or more MiB"));
    }
    fixed_source = "--fixed-mib";
  }

  auto plan = kvpool::ComputePlan(in);
  if (!plan.ok()) {
    if (plan.status().code() != absl::StatusCode::kResourceExhausted) return FailWith(plan.status());
    // The remedy's figure first; the refusal stays the last line (deploy/ferry-cluster shows it).
    printf("the longest window that fits --parallel %lld here: %lld tokens\n", static_cast<long long>(in.lanes),
           static_cast<long long>(kvpool::LongestContext(in)));
    return Fail(1, std::string(plan.status().message()));
  }
  const kvpool::Plan& p = *plan;
  printf("layout: %s (--kv-pages %s at %lld %s, %s cache)\n", kvpool::LayoutName(p.layout),
         kvpool::KvPagesName(*mode), static_cast<long long>(ranks), ranks == 1 ? "rank" : "ranks",
         kvpool::CacheDtypeName(*dtype));
  printf("bytes a token a rank: %lld = %lld latent + %lld replicated\n",
         static_cast<long long>(bpt->total()), static_cast<long long>(bpt->latent),
         static_cast<long long>(bpt->replicated));
  printf("fixed a stream a rank: %s MiB (%s)\n", kvpool::FormatMiB(in.fixed_bytes).c_str(),
         fixed_source.c_str());
  printf("%s", kvpool::FormatPlan(in, p).c_str());
  const kvpool::StreamFit fit = kvpool::FitStreams(in, p);
  printf("streams at a %lld-token window: %lld of the %lld can hold a whole window at once; all %lld at once can hold "
         "%lld tokens each\n",
         static_cast<long long>(p.context), static_cast<long long>(fit.whole_windows), static_cast<long long>(p.lanes),
         static_cast<long long>(p.lanes), static_cast<long long>(fit.even_tokens));
  return 0;
}

}  // namespace ferry::cli
