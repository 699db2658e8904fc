// ferry-coordinator: the public gRPC API, the control plane for the workers, the scheduler and
// the Prometheus metrics of one Ferry deployment.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/args.h"
#include "common/cluster_token.h"
#include "common/log.h"
#include "coordinator/api_service.h"
#include "coordinator/control_service.h"
#include "coordinator/health_service.h"
#include "coordinator/metrics.h"
#include "coordinator/openai_api.h"
#include "coordinator/options.h"
#include "coordinator/pool.h"
#include "coordinator/scheduler.h"
#include "model/checkpoint/checkpoint.h"
#include "kvpool/plan.h"
#include "model/families/causal_lm.h"
#include "model/checkpoint/config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

// The coordinator's options (coordinator/options.h) and those every serving process takes
// (common/options.h) come from their tables; these are the coordinator's own.
FERRY_COORDINATOR_OPTIONS(FERRY_DEFINE_OPTION)
FERRY_PROCESS_OPTIONS(FERRY_DEFINE_OPTION)
ABSL_FLAG(std::string, model, "", "Checkpoint directory (the coordinator reads config.json, tokenizer.json and the chat template)");
ABSL_FLAG(int32_t, ranks, 1, "Worker ranks (tensor-parallel width) to wait for");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token the workers must present (mode 0600); empty: FERRY_CLUSTER_TOKEN, "
          "or none. Required when --host is not loopback");

namespace {

volatile std::sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

// The model's text assets, each when its directory has it: the tokenizer (requests may then carry
// text) and the chat template (they may then carry a conversation). A malformed one, or a
// tokenizer with ids beyond the model's vocabulary, stops the start.
struct TextAssets {
  std::optional<ferry::text::Tokenizer> tokenizer;
  std::optional<ferry::text::ChatTemplate> chat_template;
};

absl::StatusOr<TextAssets> LoadTextAssets(const std::string& dir, int64_t vocab) {
  using namespace ferry;
  TextAssets out;
  if (const std::string path = dir + "/tokenizer.json"; std::filesystem::exists(path)) {
    absl::StatusOr<text::Tokenizer> loaded = text::Tokenizer::Load(path);
    if (!loaded.ok()) return loaded.status();
    if (loaded->vocab_size() > vocab) {
      return absl::InvalidArgumentError(absl::StrCat(path, " has ids up to ", loaded->vocab_size() - 1,
                                                     "; the model's vocabulary is ", vocab));
    }
    out.tokenizer = std::move(*loaded);
    FERRY_LOG(INFO) << "tokenizer: " << path << " (" << out.tokenizer->vocab_size() << " ids)";
  } else {
    FERRY_LOG(INFO) << "no tokenizer.json in " << dir << ": requests carry token ids only";
  }
  absl::StatusOr<std::string> source = text::ReadChatTemplate(dir);
  if (!source.ok()) {
    return source.status().code() == absl::StatusCode::kNotFound ? absl::StatusOr<TextAssets>(std::move(out))
                                                                  : source.status();
  }
  absl::StatusOr<text::ChatTemplate> parsed = text::ChatTemplate::Parse(*source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the chat template of ", dir, ": ", parsed.status().message()));
  }
  out.chat_template = std::move(*parsed);
  FERRY_LOG(INFO) << "chat template: " << source->size() << " bytes";
  return out;
}

// Starts the OpenAI-compatible API on --host:--http-port for the OpenAiApi that `make` builds from
// the options (the API key read from --api-key-file, which a port beyond loopback requires).
absl::StatusOr<std::unique_ptr<ferry::HttpServer>> StartOpenAi(
    const std::string& host, ferry::coordinator::OpenAiOptions options,
    const std::function<ferry::coordinator::OpenAiApi*(ferry::coordinator::OpenAiOptions)>& make) {
  using namespace ferry;
  if (!absl::GetFlag(FLAGS_api_key_file).empty()) {
    absl::StatusOr<std::string> key = ReadSecretFile(absl::GetFlag(FLAGS_api_key_file), "--api-key-file");
    if (!key.ok()) return key.status();
    options.api_key = *key;
  } else if (!IsLoopbackHost(host)) {
    return absl::InvalidArgumentError(absl::StrCat("--http-port on --host ", host,
                                                   " listens beyond this machine: give --api-key-file so that only "
                                                   "your clients can use it"));
  }
  coordinator::OpenAiApi* api = make(std::move(options));
  absl::StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(host, absl::GetFlag(FLAGS_http_port),
                        [api](const HttpRequest& req, HttpResponse& resp) { api->Handle(req, resp); },
                        HttpServer::Options{}, "the OpenAI API");
  if (started.ok()) FERRY_LOG(INFO) << "OpenAI-compatible API on http://" << host << ":" << (*started)->port() << "/v1";
  return started;
}

// The scheduler's options and the pool's request from the flags and the model's config; an
// error names every flag out of range with its value.
struct StartOptions {
  ferry::coordinator::SchedulerOptions opts;
  ferry::coordinator::PoolRequest pool_req;
};

absl::StatusOr<StartOptions> ReadStartOptions(const ferry::model::ModelConfig& config, int world) {
  using namespace ferry;
  StartOptions start;
  coordinator::SchedulerOptions& opts = start.opts;
  coordinator::PoolRequest& pool_req = start.pool_req;
  opts.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  opts.max_running = absl::GetFlag(FLAGS_parallel);
  opts.max_queue = absl::GetFlag(FLAGS_max_queue);
  opts.max_context = absl::GetFlag(FLAGS_context) > 0 ? absl::GetFlag(FLAGS_context) : config.max_position_embeddings;
  opts.page_size = absl::GetFlag(FLAGS_page_size);
  opts.prompt_cache_any_prefix = !config.has_linear_attention();
  opts.world = world;
  opts.carry_min_tokens = absl::GetFlag(FLAGS_carry_min_tokens);
  pool_req.explicit_pages = absl::GetFlag(FLAGS_kv_pool_pages);
  pool_req.explicit_cache_tokens = absl::GetFlag(FLAGS_prompt_cache_tokens);
  pool_req.cache_budget_bytes =
      static_cast<int64_t>(absl::GetFlag(FLAGS_prompt_cache_gib) * static_cast<double>(kvpool::kGiB));
  absl::StatusOr<kvpool::KvPages> mode = kvpool::ParseKvPages(absl::GetFlag(FLAGS_kv_pages));
  if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat("--kv-pages: ", mode.status().message()));
  pool_req.mode = *mode;
  auto split = kvpool::ParseOwnerSplit(absl::GetFlag(FLAGS_owner_split));
  if (!split.ok()) return split.status();
  pool_req.owner_split = *split;
  if (absl::Status st = model::ValidateCacheOptions(model::CacheOptions{opts.page_size, -1});
      !st.ok() || pool_req.explicit_pages < 0 || pool_req.explicit_cache_tokens < -1 ||
      absl::GetFlag(FLAGS_prompt_cache_gib) < 0 || absl::GetFlag(FLAGS_prompt_cache_gib) > 1048576) {
    return absl::InvalidArgumentError(absl::StrFormat("--page-size %lld: %s; need --kv-pool-pages >= 0 (got %lld), --prompt-cache-tokens >= -1 "
            "(got %lld), --prompt-cache-gib in [0, 1048576] (got %g)",
            static_cast<long long>(opts.page_size), st.ok() ? std::string("ok") : std::string(st.message()),
            static_cast<long long>(pool_req.explicit_pages), static_cast<long long>(pool_req.explicit_cache_tokens),
            absl::GetFlag(FLAGS_prompt_cache_gib)));
  }
  if (opts.max_running < 1 || opts.max_batch_tokens < opts.max_running || opts.max_queue < 0 || opts.max_context < 2) {
    // Every running request needs its decode row in each step, so the budget covers the lanes.
    return absl::InvalidArgumentError(absl::StrFormat("need --parallel >= 1 (got %lld), --max-batch-tokens >= --parallel (got %lld), "
            "--max-queue >= 0 (got %lld), --context >= 2 (got %lld)",
            static_cast<long long>(opts.max_running), static_cast<long long>(opts.max_batch_tokens),
            static_cast<long long>(opts.max_queue), static_cast<long long>(opts.max_context)));
  }
  if (!(absl::GetFlag(FLAGS_step_timeout) > 0 && absl::GetFlag(FLAGS_step_timeout) <= 86400) ||
      !(absl::GetFlag(FLAGS_keepalive_s) >= 0.1 && absl::GetFlag(FLAGS_keepalive_s) <= 3600) ||
      !(absl::GetFlag(FLAGS_ready_timeout_s) > 0 && absl::GetFlag(FLAGS_ready_timeout_s) <= 86400)) {
    return absl::InvalidArgumentError(absl::StrFormat("need --step-timeout in (0, 86400] s (got %g), --keepalive-s in [0.1, 3600] (got %g), "
            "--ready-timeout-s in (0, 86400] (got %g)",
            absl::GetFlag(FLAGS_step_timeout), absl::GetFlag(FLAGS_keepalive_s), absl::GetFlag(FLAGS_ready_timeout_s)));
  }
  if (opts.carry_min_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("need --carry-min-tokens >= 0 (got %lld)",
                                                      static_cast<long long>(opts.carry_min_tokens)));
  }
  return start;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry;
  absl::SetProgramUsageMessage("ferry-coordinator --model DIR --ranks N [--port P] [--metrics-port M] ...");
  std::vector<std::string> args = NormaliseFlagArgs(argc, argv);
  std::vector<char*> cargs = ArgvOf(args);
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (absl::GetFlag(FLAGS_verbose)) SetMinLogLevel(LogLevel::kDebug);

  const std::string dir = absl::GetFlag(FLAGS_model);
  std::string served_model_name = absl::GetFlag(FLAGS_served_model_name);
  if (served_model_name.empty()) {
    std::string trimmed = dir;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
    served_model_name = trimmed.substr(trimmed.rfind('/') == std::string::npos ? 0 : trimmed.rfind('/') + 1);
  }
  const int world = absl::GetFlag(FLAGS_ranks);
  if (dir.empty() || world < 1) {
    fprintf(stderr, "ferry-coordinator: --model DIR and --ranks >= 1 are required\n");
    return 2;
  }
  auto json = model::ReadJsonFile(dir + "/config.json");
  if (!json.ok()) {
    fprintf(stderr, "ferry-coordinator: %s\n", std::string(json.status().message()).c_str());
    return 2;
  }
  auto config = model::ParseModelConfig(*json, dir + "/config.json");
  if (!config.ok()) {
    fprintf(stderr, "ferry-coordinator: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<StartOptions> start = ReadStartOptions(*config, world);
  if (!start.ok()) {
    fprintf(stderr, "ferry-coordinator: %s\n", std::string(start.status().message()).c_str());
    return 2;
  }
  coordinator::SchedulerOptions opts = start->opts;
  const coordinator::PoolRequest pool_req = start->pool_req;

  coordinator::Metrics metrics(world, served_model_name);
  const std::string host = absl::GetFlag(FLAGS_host);
  const absl::StatusOr<std::string> token = LoadClusterToken(absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) {
    fprintf(stderr, "ferry-coordinator: %s\n", std::string(token.status().message()).c_str());
    return 2;
  }
  if (token->empty() && !IsLoopbackHost(host)) {
    fprintf(stderr,
            "ferry-coordinator: --host %s listens beyond this machine: give the cluster token (--token-file, or "
            "FERRY_CLUSTER_TOKEN) so that no one else can join as a rank\n",
            host.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_metrics_port) > 0) {
    absl::Status st = metrics.Expose(host, absl::GetFlag(FLAGS_metrics_port));
    if (!st.ok()) {
      fprintf(stderr, "ferry-coordinator: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  coordinator::ControlService control(dir, world, config->vocab_size, opts.page_size,
                                      std::chrono::seconds(static_cast<int64_t>(std::ceil(absl::GetFlag(FLAGS_ready_timeout_s)))), &metrics);
  control.RequireToken(*token);
  coordinator::Scheduler scheduler(opts, &control, &metrics);
  std::atomic<bool> accepting{false};  // set once every rank is ready and the scheduler runs
  absl::StatusOr<TextAssets> text_assets = LoadTextAssets(dir, config->vocab_size);
  if (!text_assets.ok()) {
    fprintf(stderr, "ferry-coordinator: %s\n", std::string(text_assets.status().message()).c_str());
    return 2;
  }
  const text::Tokenizer* tokenizer = text_assets->tokenizer ? &*text_assets->tokenizer : nullptr;
  const text::ChatTemplate* chat_template = text_assets->chat_template ? &*text_assets->chat_template : nullptr;
  coordinator::ApiService api(*config, dir, &scheduler, &control, &accepting, tokenizer);
  api.SetChatTemplate(chat_template);
  // The OpenAI-compatible HTTP API (with --http-port), started with the gRPC servers below.
  std::unique_ptr<coordinator::OpenAiApi> openai;
  std::unique_ptr<HttpServer> http;
  if (absl::GetFlag(FLAGS_http_port) > 0) {
    coordinator::OpenAiOptions o;
    o.served_model_name = served_model_name;
    o.generation_defaults = coordinator::ReadGenerationDefaults(dir);
    o.max_context = opts.max_context;
    absl::StatusOr<std::unique_ptr<HttpServer>> started = StartOpenAi(
        host, std::move(o), [&](coordinator::OpenAiOptions o2) {
          openai = std::make_unique<coordinator::OpenAiApi>(&api, *config, tokenizer, chat_template, &accepting,
                                                            std::move(o2));
          return openai.get();
        });
    if (!started.ok()) {
      fprintf(stderr, "ferry-coordinator: %s\n", std::string(started.status().message()).c_str());
      return 2;
    }
    http = std::move(*started);
  }

  control.SetStepDeadline(std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_step_timeout) * 1000) + 5000));

  // Health is HealthService (NOT_SERVING until the workers are up), not gRPC's built-in one.
  grpc::EnableDefaultHealthCheckService(false);
  coordinator::HealthService health({ferry::v1::Ferry::service_full_name()});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Two servers: the public API (and health) on --port, the control service the workers register
  // on on --control-port, so each can be reached, firewalled and watched on its own.
  const std::string address = absl::StrCat(host, ":", absl::GetFlag(FLAGS_port));
  const int control_port = absl::GetFlag(FLAGS_control_port) > 0 ? absl::GetFlag(FLAGS_control_port)
                                                                  : absl::GetFlag(FLAGS_port) + 1;
  const std::string control_address = absl::StrCat(host, ":", control_port);
  // What a caller may send: a valid Generate holds at most a context of prompt ids and as many
  // stop ids (up to 5 bytes each on the wire) besides a few fields; the workers' messages are
  // smaller. A larger message is refused by gRPC (RESOURCE_EXHAUSTED with both sizes) before it
  // is parsed, so no client can make the coordinator hold more than this a call.
  const int64_t receive_limit = std::min<int64_t>((int64_t{1} << 20) + 10 * opts.max_context, int64_t{256} << 20);
  // Keepalive both ways: each server pings every connection each --keepalive-s and drops one whose
  // peer does not answer within as long (a stopped or cut-off worker loses its control stream:
  // dead); workers ping it as often (their --keepalive-s), which it permits.
  const int keepalive_ms = static_cast<int>(absl::GetFlag(FLAGS_keepalive_s) * 1000);
  auto build = [&](const std::string& where, std::initializer_list<grpc::Service*> services, int* bound) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(where, grpc::InsecureServerCredentials(), bound);
    for (grpc::Service* service : services) builder.RegisterService(service);
    builder.SetMaxReceiveMessageSize(static_cast<int>(receive_limit));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // A port another process holds is an error here, not a port shared with it (gRPC's default
    // SO_REUSEPORT would let a second coordinator answer some of the first one's calls).
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 100);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    builder.SetMaxSendMessageSize(256 << 20);
    return builder.BuildAndStart();
  };
  int bound_port = 0, bound_control = 0;
  std::unique_ptr<grpc::Server> server = build(address, {&api, &health}, &bound_port);
  if (!server || bound_port == 0) {
    fprintf(stderr, "ferry-coordinator: cannot listen on %s (port taken?)\n", address.c_str());
    return 2;
  }
  std::unique_ptr<grpc::Server> control_server = build(control_address, {&control}, &bound_control);
  if (!control_server || bound_control == 0) {
    fprintf(stderr, "ferry-coordinator: cannot listen on %s for the control service (port taken?)\n",
            control_address.c_str());
    health.Shutdown();  // the API server already answers: end any Watch before it stops
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return 2;
  }
  FERRY_LOG(INFO) << "listening on " << address << " (API), " << control_address << " (control); waiting for "
                  << world << " worker rank(s)";

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // The main thread alone starts the scheduler and sets the health, so the two never race.
  const auto ready_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_ready_timeout_s) * 1000));
  bool started = false, failed = false;
  int exit_code = 0;
  while (g_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!started && !failed) {
      absl::Status st = control.ReadyState();
      if (st.ok()) {
        // Every rank reported its room: plan the pool, size the arenas, then serve.
        std::vector<coordinator::RankRoom> rooms;
        for (const coordinator::RankState& r : control.Ranks()) {
          rooms.push_back({r.room_bytes, r.page_bytes, r.fixed_bytes, r.latent_page_bytes});
        }
        absl::StatusOr<coordinator::PoolChoice> pool = coordinator::ChoosePool(rooms, opts, pool_req);
        if (pool.ok()) st = control.SizeArenas(pool->opts.kv_pages, pool->opts.owner_split ? pool->opts.latent_pages : 0);
        if (!pool.ok() || !st.ok()) {
          FERRY_LOG(ERROR) << "cannot serve this configuration: "
                           << (pool.ok() ? st.message() : pool.status().message());
          exit_code = 2;
          break;
        }
        FERRY_LOG(INFO) << pool->summary;
        opts = pool->opts;
        scheduler.Configure(opts);
        scheduler.Start();
        accepting = true;
        health.SetServing(true);
        started = true;
        FERRY_LOG(INFO) << "serving " << model::FamilyName(config->family) << " on " << world << " rank(s): context "
                        << opts.max_context << ", --parallel " << opts.max_running << ", " << opts.max_batch_tokens
                        << " tokens a step";
      } else if (st.code() == absl::StatusCode::kUnavailable ||
                 std::chrono::steady_clock::now() > ready_deadline) {
        FERRY_LOG(ERROR) << "workers did not come up: "
                         << (st.code() == absl::StatusCode::kUnavailable ? std::string(st.message())
                                                                         : absl::StrCat(st.message(), " after ",
                                                                                        absl::GetFlag(FLAGS_ready_timeout_s), " s"));
        exit_code = 1;
        break;
      }
      continue;
    }
    const auto [dead_rank, death] = control.FirstDeath();
    if (started && !failed && (dead_rank >= 0 || !scheduler.Snapshot().serving)) {
      // Keep answering (health NOT_SERVING, UNAVAILABLE for new requests) until told to stop.
      failed = true;
      accepting = false;
      health.SetServing(false);
      const std::string why = dead_rank >= 0 ? absl::StrCat("rank ", dead_rank, " is dead: ", death)
                                             : scheduler.Snapshot().failure;
      FERRY_LOG(ERROR) << "not serving any more: " << why;
      control.CancelAll();  // a step blocked on a live rank returns at once
      // Ends every live request with an error; new ones get UNAVAILABLE from now on.
      scheduler.Stop(why);
      exit_code = 1;
    }
  }
  if (g_signal != 0) FERRY_LOG(INFO) << "signal " << g_signal << ": shutting down";
  accepting = false;
  health.SetServing(false);
  health.Shutdown();  // ends Watch streams, which the server's Shutdown would wait for
  scheduler.Stop("the server is shutting down");
  control.Shutdown("the coordinator is shutting down");
  http.reset();  // every HTTP request has ended with the scheduler's stop
  control_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return g_signal != 0 && exit_code == 0 ? 0 : exit_code;
}
