// `ferry plan`: the KV memory plan (kvpool/plan.h) for a model, a TP width and a room, without
// loading weights: only config.json is read. The room is what a worker would report; here the
// user gives it, so a deployment can be sized before it is started.
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
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cache/kv_bytes.h"

namespace ferry::cli {
namespace {

int Fail(int code, const std::string& message) {
  fprintf(stderr, "ferry plan: %s\n", message.c_str());
  return code;
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

  const int64_t ranks = absl::GetFlag(FLAGS_ranks);
  auto mode = kvpool::ParseKvPages(absl::GetFlag(FLAGS_kv_pages));
  if (!mode.ok()) return Fail(2, std::string(mode.status().message()));
  auto dtype = kvpool::ParseCacheDtype(absl::GetFlag(FLAGS_kv_cache));
  if (!dtype.ok()) return Fail(2, std::string(dtype.status().message()));
  auto layout = kvpool::ResolveLayout(*mode, ranks, *dtype);
  if (!layout.ok()) return Fail(2, std::string(layout.status().message()));
  auto bpt = model::BytesPerTokenPerRank(*config, *dtype, absl::GetFlag(FLAGS_mtp_layers));
  if (!bpt.ok()) return Fail(2, std::string(bpt.status().message()));

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
  const double room_gib = absl::GetFlag(FLAGS_room_gib);
  if (room_gib < 0 && std::isfinite(room_gib)) {
    return Fail(2, "--room-gib G is required: the GiB a rank has left for KV after its weights "
                   "and workspace (the smallest rank's)");
  }
  if (!ToBytes(room_gib, kvpool::kGiB, &in.room_bytes)) {
    return Fail(2, absl::StrCat("--room-gib is ", room_gib, "; use 0 to 1048576 GiB"));
  }
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
    const bool refused = plan.status().code() == absl::StatusCode::kResourceExhausted;
    return Fail(refused ? 1 : 2, std::string(plan.status().message()));
  }
  const kvpool::Plan& p = *plan;
  printf("model: %s (%s)\n", model::FamilyName(config->family), path.c_str());
  printf("layout: %s (--kv-pages %s at %lld %s, %s cache)\n", kvpool::LayoutName(p.layout),
         kvpool::KvPagesName(*mode), static_cast<long long>(ranks), ranks == 1 ? "rank" : "ranks",
         kvpool::CacheDtypeName(*dtype));
  printf("bytes a token a rank: %lld = %lld latent + %lld replicated\n",
         static_cast<long long>(bpt->total()), static_cast<long long>(bpt->latent),
         static_cast<long long>(bpt->replicated));
  printf("fixed a stream a rank: %s MiB (%s)\n", kvpool::FormatMiB(in.fixed_bytes).c_str(),
         fixed_source.c_str());
  printf("%s", kvpool::FormatPlan(in, p).c_str());
  return 0;
}

}  // namespace ferry::cli
