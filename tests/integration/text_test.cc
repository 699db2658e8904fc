// Text in and out through `ferry serve`: a text prompt tokenized by the server with the model's
// tokenizer.json, the text of the generated tokens beside their ids, stop strings, and a model
// without a tokenizer.
#include <string>
#include <vector>

#include "cli/client.h"
#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/server_process.h"
#include "text/tokenizer.h"

namespace ferry {
namespace {

using ferry::testing::Server;
using namespace ferry::serve_test;  // NOLINT: the tests' client helpers

TEST_CASE("serve: a text prompt is tokenized by the server - and the tokens come back with their text", "[serve][text]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  auto tok = text::Tokenizer::Load(kDsa + "/tokenizer.json");
  REQUIRE(tok.ok());
  const std::string prompt = "<|user|>\nHello, world! 你好 😀 12345<|assistant|>";
  auto ids = tok->Encode(prompt);
  REQUIRE(ids.ok());
  for (bool stream : {false, true}) {
    INFO("stream " << stream);
    GenerateRequest by_text;
    by_text.set_prompt(prompt);
    by_text.mutable_sampling()->set_max_tokens(24);
    by_text.mutable_sampling()->set_ignore_eos(true);
    by_text.set_stream(stream);
    std::string streamed_text;
    std::vector<int32_t> streamed;
    auto r = cli::GenerateRemote(server.address(), by_text, std::chrono::seconds(60), [&](const v1::TokenChunk& c) {
      streamed.insert(streamed.end(), c.token_ids().begin(), c.token_ids().end());
      streamed_text += c.text();
      // A chunk's text is whole characters.
      std::string check;
      CHECK(text::AppendUtf8Lossy(c.text(), false, &check) == c.text().size());
    });
    REQUIRE(r.ok());
    std::vector<int32_t> got = stream ? streamed : std::vector<int32_t>(r->token_ids().begin(), r->token_ids().end());
    // The same tokens as the same prompt sent as ids, and their text.
    auto by_ids = Run(server.address(), Greedy(*ids, 24));
    REQUIRE(by_ids.ok());
    CHECK(got == std::vector<int32_t>(by_ids->token_ids().begin(), by_ids->token_ids().end()));
    CHECK(r->usage().prompt_tokens() == static_cast<int32_t>(ids->size()));
    auto want = tok->Decode(got, /*skip_special=*/true);
    REQUIRE(want.ok());
    CHECK(streamed_text + r->text() == *want);
  }
  // Both forms at once, text that is not UTF-8.
  GenerateRequest both = Greedy(*ids, 4);
  both.set_prompt("hi");
  auto refused = Run(server.address(), both);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  GenerateRequest bad;
  bad.set_prompt(std::string("ok\xC3(", 4));
  bad.mutable_sampling()->set_max_tokens(4);
  refused = Run(server.address(), bad);
  // (proto3 strings are UTF-8: the message itself does not parse)
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.status().message()).find("not a valid ferry.v1.GenerateRequest") != std::string::npos);
  auto info_ok = cli::GetServerInfo(server.address());
  CHECK(info_ok.ok());
}

TEST_CASE("serve: a stop string ends the text before it and the request there - streamed or not", "[serve][text]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  auto text_request = [](bool stream, const std::vector<std::string>& stops) {
    GenerateRequest req;
    req.set_prompt("Once upon a time");
    req.mutable_sampling()->set_max_tokens(32);
    req.mutable_sampling()->set_ignore_eos(true);
    for (const std::string& s : stops) req.mutable_sampling()->add_stop(s);
    req.set_stream(stream);
    return req;
  };
  std::string full_streamed;
  auto full = cli::GenerateRemote(server.address(), text_request(false, {}), std::chrono::seconds(60),
                                  [&](const v1::TokenChunk&) {});
  REQUIRE(full.ok());
  const std::string all = full->text();
  REQUIRE(full->token_ids_size() == 32);
  // A stop string from the middle of that text, cut on character boundaries.
  auto boundary = [&](size_t at) { return at == all.size() || (static_cast<unsigned char>(all[at]) & 0xC0) != 0x80; };
  size_t k = all.size() / 2;
  while (k < all.size() && !boundary(k)) ++k;
  size_t end = k + 3;
  while (end < all.size() && !boundary(end)) ++end;
  REQUIRE(end <= all.size());
  const std::string stop = all.substr(k, end - k);
  const std::string want = all.substr(0, all.find(stop));
  INFO("text [" << all << "] stop [" << stop << "]");
  for (bool stream : {false, true}) {
    INFO("stream " << stream);
    std::string streamed;
    std::vector<int32_t> given;
    auto r = cli::GenerateRemote(server.address(), text_request(stream, {"never appears \x01", stop}),
                                 std::chrono::seconds(60), [&](const v1::TokenChunk& c) {
                                   streamed += c.text();
                                   given.insert(given.end(), c.token_ids().begin(), c.token_ids().end());
                                 });
    REQUIRE(r.ok());
    given.insert(given.end(), r->token_ids().begin(), r->token_ids().end());
    CHECK(r->finish_reason() == v1::FINISH_REASON_STOP);
    CHECK(streamed + r->text() == want);
    // The request ended where the stop appeared, not at max_tokens: the tokens given run up to
    // the one that completed the stop string, and usage counts exactly those.
    CHECK(given.size() < 32);
    CHECK(std::equal(given.begin(), given.end(), full->token_ids().begin()));
    auto upto = text::Tokenizer::Load(kDsa + "/tokenizer.json")->Decode(given, /*skip_special=*/true);
    REQUIRE(upto.ok());
    CHECK(upto->find(stop) != std::string::npos);
    CHECK(r->usage().completion_tokens() == static_cast<int32_t>(given.size()));
  }
  // Counted as stopped, not aborted.
  const std::string m = testing::ScrapeMetrics(server.metrics_port());
  CHECK(testing::MetricValue(m, "ferry:request_success_total{finished_reason=\"stop\"}") == 2);
  CHECK(testing::MetricValue(m, "ferry:request_success_total{finished_reason=\"abort\"}") == 0);
  // Bounds: 17 strings, an empty one, 257 bytes.
  auto refused = Run(server.address(), text_request(false, std::vector<std::string>(17, "x")));
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  refused = Run(server.address(), text_request(false, {""}));
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  refused = Run(server.address(), text_request(false, {std::string(257, 'a')}));
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.status().message()) == "sampling.stop[0] is 257 bytes; 1 to 256");
}

TEST_CASE("serve: a model without tokenizer.json refuses a text prompt - and serves ids", "[serve][text]") {
  Server server(std::string(FERRY_TEST_DATA_DIR) + "/glm5next-kpool8", 1);
  REQUIRE(server.serving());
  GenerateRequest req;
  req.set_prompt("hello");
  req.mutable_sampling()->set_max_tokens(4);
  auto r = Run(server.address(), req);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(r.status().message()).find("has no tokenizer.json: send prompt_token_ids") != std::string::npos);
  auto ids = Run(server.address(), Greedy({5, 6, 7}, 4));
  REQUIRE(ids.ok());
  CHECK(ids->token_ids_size() == 4);
  CHECK(ids->text().empty());
  GenerateRequest stop = Greedy({5, 6, 7}, 4);
  stop.mutable_sampling()->add_stop("x");
  auto refused = Run(server.address(), stop);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ferry
