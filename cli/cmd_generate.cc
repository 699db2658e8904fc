#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/load_model.h"
#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "text/tokenizer.h"

namespace ferry::cli {
namespace {

bool ParseIds(const std::string& text, const char* what, std::vector<int32_t>* out) {
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t v;
    if (!absl::SimpleAtoi(piece, &v)) {
      fprintf(stderr, "ferry generate: %s: '%s' is not a token id\n", what, std::string(piece).c_str());
      return false;
    }
    out->push_back(v);
  }
  return true;
}

// With --logprobs: one line a generated token after the ids, "logprobs: ID LOGPROB" then the
// position's most likely tokens as ID:LOGPROB.
void PrintLogprobs(int32_t token, float logprob, const std::vector<std::pair<int32_t, float>>& top) {
  printf("logprobs: %d %.6f", token, logprob);
  for (const auto& [id, lp] : top) printf(" %d:%.6f", id, lp);
  printf("\n");
}

void PrintLogprobs(const ferry::v1::TokenLogprobs& t) {
  std::vector<std::pair<int32_t, float>> top;
  for (const auto& p : t.top_logprobs()) top.emplace_back(p.token_id(), p.logprob());
  PrintLogprobs(t.token_id(), t.logprob(), top);
}

}  // namespace

// `generate --server`: one Generate call; the ids go to stdout as they arrive (streaming) or at
// the end, comma-separated, then with --logprobs a line for each token's log-probabilities. With
// a text prompt (`text`), the generated text goes to stdout instead.
int GenerateOnServer(const std::string& server, const std::vector<int32_t>& prompt, const std::string& text,
                     const model::GenerateOptions& opt) {
  ferry::v1::GenerateRequest req;
  req.set_request_id(absl::GetFlag(FLAGS_request_id));
  for (int32_t t : prompt) req.add_prompt_token_ids(t);
  req.set_prompt(text);
  ferry::v1::SamplingParams* sp = req.mutable_sampling();
  sp->set_temperature(opt.sampling.temperature);
  sp->set_top_k(opt.sampling.top_k);
  sp->set_top_p(opt.sampling.top_p);
  sp->set_seed(opt.seed);
  sp->set_max_tokens(static_cast<int32_t>(opt.max_tokens));
  for (int32_t t : opt.stop_token_ids) sp->add_stop_token_ids(t);
  sp->set_ignore_eos(opt.ignore_eos);
  if (opt.sampling.top_logprobs >= 0) {
    sp->set_logprobs(true);
    sp->set_top_logprobs(opt.sampling.top_logprobs);
  }
  req.set_stream(absl::GetFlag(FLAGS_stream));
  bool first = true;
  auto print = [&](const auto& ids) {
    if (!text.empty()) return;
    for (int32_t t : ids) {
      printf(first ? "%d" : ",%d", t);
      first = false;
    }
    fflush(stdout);
  };
  auto print_text = [&](const std::string& piece) {
    if (text.empty()) return;
    printf("%s", piece.c_str());
    first = false;
    fflush(stdout);
  };
  std::vector<ferry::v1::TokenLogprobs> logprobs;
  auto res = GenerateRemote(server, req,
                            std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000)),
                            [&](const ferry::v1::TokenChunk& c) {
                              print(c.token_ids());
                              print_text(c.text());
                              logprobs.insert(logprobs.end(), c.logprobs().begin(), c.logprobs().end());
                            });
  if (!res.ok()) {
    if (!first) printf("\n");
    fprintf(stderr, "ferry generate: %s\n", std::string(res.status().message()).c_str());
    return res.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  print(res->token_ids());
  print_text(res->text());
  printf("\n");
  logprobs.insert(logprobs.end(), res->logprobs().begin(), res->logprobs().end());
  for (const ferry::v1::TokenLogprobs& t : logprobs) PrintLogprobs(t);
  fflush(stdout);  // the ids before the summary on stderr, also when both go to one terminal
  static const char* kReasons[] = {"unspecified", "stop", "length", "abort", "error"};
  const int reason = res->finish_reason();
  fprintf(stderr, "finish_reason: %s, %d prompt + %d generated tokens, ttft %.3f s, e2e %.3f s%s%s\n",
          reason >= 0 && reason <= 4 ? kReasons[reason] : "?", res->usage().prompt_tokens(),
          res->usage().completion_tokens(), res->timings().time_to_first_token_seconds(), res->timings().e2e_seconds(),
          res->error().empty() ? "" : "; error: ", res->error().c_str());
  return reason == ferry::v1::FINISH_REASON_STOP || reason == ferry::v1::FINISH_REASON_LENGTH ? 0 : 1;
}

int RunGenerate() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  const std::string server = absl::GetFlag(FLAGS_server);
  if (dir.empty() == server.empty()) {
    fprintf(stderr, "ferry generate: give either --model DIR (in-process) or --server HOST:PORT\n");
    return 2;
  }
  model::GenerateOptions opt;
  std::vector<int32_t> prompt;
  const std::string text = absl::GetFlag(FLAGS_prompt);
  if (!ParseIds(absl::GetFlag(FLAGS_prompt_ids), "--prompt-ids", &prompt) ||
      !ParseIds(absl::GetFlag(FLAGS_stop_token_ids), "--stop-token-ids", &opt.stop_token_ids)) {
    return 2;
  }
  if (prompt.empty() == text.empty()) {
    fprintf(stderr, "ferry generate: give --prompt TEXT or --prompt-ids 1,2,3 (one of them)\n");
    return 2;
  }
  opt.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  opt.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  opt.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  opt.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  opt.seed = absl::GetFlag(FLAGS_seed);
  opt.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  opt.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  opt.sampling.top_logprobs = absl::GetFlag(FLAGS_logprobs);
  if (opt.max_tokens < 1 || opt.sampling.temperature < 0 || opt.sampling.top_k < 0 ||
      !(opt.sampling.top_p > 0 && opt.sampling.top_p <= 1) || opt.sampling.top_logprobs < -1 ||
      opt.sampling.top_logprobs > step::kMaxTopLogprobs) {
    fprintf(stderr,
            "ferry generate: need --max-tokens >= 1 (got %lld), --temperature >= 0 (got %g), "
            "--top-k >= 0 (got %d), --top-p in (0, 1] (got %g), --logprobs in [-1, %d] (got %d)\n",
            static_cast<long long>(opt.max_tokens), opt.sampling.temperature, opt.sampling.top_k,
            opt.sampling.top_p, step::kMaxTopLogprobs, opt.sampling.top_logprobs);
    return 2;
  }
  if (!server.empty()) return GenerateOnServer(server, prompt, text, opt);
  // In-process with text: the model directory's tokenizer.
  std::optional<text::Tokenizer> tokenizer;
  if (!text.empty()) {
    auto loaded = text::Tokenizer::Load(dir + "/tokenizer.json");
    if (!loaded.ok()) {
      fprintf(stderr, "ferry generate: --prompt needs the model's tokenizer: %s\n",
              std::string(loaded.status().message()).c_str());
      return 2;
    }
    tokenizer = std::move(*loaded);
    auto ids = tokenizer->Encode(text);
    if (!ids.ok()) {
      fprintf(stderr, "ferry generate: --prompt: %s\n", std::string(ids.status().message()).c_str());
      return 2;
    }
    prompt = std::move(*ids);
  }
  auto model = LoadModelOn(absl::GetFlag(FLAGS_device), dir, absl::GetFlag(FLAGS_precision),
                           absl::GetFlag(FLAGS_fp8_experts), {}, absl::GetFlag(FLAGS_nvfp4_experts),
                           absl::GetFlag(FLAGS_nvfp4_numerics));
  if (!model.ok()) {
    fprintf(stderr, "ferry generate: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto res = model::Generate(**model, prompt, opt);
  if (!res.ok()) {
    fprintf(stderr, "ferry generate: %s\n", std::string(res.status().message()).c_str());
    return 2;
  }
  if (tokenizer) {
    auto out = tokenizer->Decode(res->tokens, /*skip_special=*/true);
    printf("%s\n", out.ok() ? out->c_str() : "");
  } else {
    printf("%s\n", absl::StrJoin(res->tokens, ",").c_str());
  }
  for (const step::SampledToken& t : res->logprobs) {
    std::vector<std::pair<int32_t, float>> top;
    for (const step::TokenLogprob& p : t.top) top.emplace_back(p.token, p.logprob);
    PrintLogprobs(t.token, t.logprob.value_or(0.0f), top);
  }
  fprintf(stderr, "finish_reason: %s, %zu tokens\n", res->finish_reason.c_str(), res->tokens.size());
  return 0;
}

}  // namespace ferry::cli
