// The OpenAI-compatible HTTP API of `ferry serve` (--http-port), through real HTTP: routes and
// errors, completions and chat (whole and streamed as server-sent events) against the gRPC
// API's tokens, the reply split into reasoning and tool calls (on the scripted checkpoint,
// tests/data/glm-dsa-scripted, whose replies are fixed), a client that goes away, the API key.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/server_process.h"

namespace ferry {
namespace {

using ferry::testing::HttpCall;
using ferry::testing::Server;
using ferry::testing::SseData;
using Json = nlohmann::ordered_json;
using namespace ferry::serve_test;  // NOLINT: the tests' client helpers

const std::string kScripted = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-scripted";
// What the scripted checkpoint writes after an open <think> (then the call), and the call.
const std::string kScriptedReasoning = "Sure thing.";
const char* kScriptedCall = R"({"city":"Oslo"})";

Json Post(int port, const std::string& path, const Json& body, int want_status = 200,
          const std::vector<std::string>& headers = {}) {
  const testing::HttpAnswer a = HttpCall(port, "POST", path, body.dump(), headers);
  INFO(a.head << "\n" << a.body);
  CHECK(a.status == want_status);
  Json j = Json::parse(a.body, nullptr, false);
  REQUIRE(!j.is_discarded());
  return j;
}

// A streamed call's events (without the final [DONE], which is checked).
std::vector<Json> PostStream(int port, const std::string& path, Json body) {
  body["stream"] = true;
  const testing::HttpAnswer a = HttpCall(port, "POST", path, body.dump());
  INFO(a.head << "\n" << a.body);
  CHECK(a.status == 200);
  CHECK(a.head.find("Content-Type: text/event-stream") != std::string::npos);
  std::vector<std::string> data = SseData(a.body);
  REQUIRE(!data.empty());
  CHECK(data.back() == "[DONE]");
  std::vector<Json> events;
  for (size_t i = 0; i + 1 < data.size(); ++i) events.push_back(Json::parse(data[i]));
  return events;
}

TEST_CASE("openai: health and models and errors in OpenAI's shape", "[serve][openai]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  const int port = server.http_port();
  CHECK(HttpCall(port, "GET", "/health").status == 200);
  const testing::HttpAnswer models = HttpCall(port, "GET", "/v1/models");
  REQUIRE(models.status == 200);
  const Json list = Json::parse(models.body);
  REQUIRE(list["data"].size() == 1);
  CHECK(list["data"][0]["id"] == "glm-dsa-tiny");
  CHECK(list["data"][0]["object"] == "model");
  CHECK(HttpCall(port, "GET", "/v1/models/glm-dsa-tiny").status == 200);
  CHECK(HttpCall(port, "GET", "/v1/models/other").status == 404);
  CHECK(HttpCall(port, "GET", "/v1/completions").status == 405);
  CHECK(HttpCall(port, "GET", "/v2/anything").status == 404);
  const testing::HttpAnswer junk = HttpCall(port, "POST", "/v1/completions", "{not json");
  CHECK(junk.status == 400);
  CHECK(Json::parse(junk.body)["error"]["type"] == "invalid_request_error");
  auto error_of = [&](const Json& body, int status) {
    return Post(port, "/v1/completions", body, status)["error"]["message"].get<std::string>();
  };
  CHECK(error_of({{"model", "gpt-4"}, {"prompt", "hi"}}, 404).find("does not exist") != std::string::npos);
  CHECK(error_of({{"prompt", "hi"}, {"n", 2}}, 400).find("n is 2") != std::string::npos);
  CHECK(error_of({{"prompt", "hi"}, {"max_tokens", 0}}, 400).find("max_tokens is 0") != std::string::npos);
  CHECK(error_of({{"prompt", "hi"}, {"temperature", "hot"}}, 400) == "temperature must be a number");
  CHECK(error_of({{"prompt", "hi"}, {"max_tokens", 5000}}, 400).find("exceeds the context length") != std::string::npos);
  CHECK(error_of({{"prompt", Json::array({"a", "b"})}}, 400).find("a list of 2 prompts") != std::string::npos);
  CHECK(error_of({{"prompt", Json::array({5, 999999})}}, 400).find("outside the vocabulary") != std::string::npos);
  CHECK(Post(port, "/v1/chat/completions", {{"messages", Json::array()}}, 400)["error"]["message"] ==
        "messages must be a non-empty array of {role, content}");
  CHECK(Post(port, "/v1/chat/completions", {{"messages", Json::array({{{"role", "robot"}, {"content", "x"}}})}}, 400)
            ["error"]["message"]
                .get<std::string>()
                .find("messages[0].role is 'robot'") != std::string::npos);
  // Still serving.
  CHECK(Post(port, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}})["choices"].size() == 1);
}

TEST_CASE("openai: completions whole and streamed give the gRPC API's text and usage", "[serve][openai]") {
  Server server(kDsa, 1, {"--prompt-cache-tokens", "4096"});
  REQUIRE(server.serving());
  const int port = server.http_port();
  const std::string prompt = "<|user|>\nHello, world!<|assistant|>";
  GenerateRequest g;
  g.set_prompt(prompt);
  g.mutable_sampling()->set_max_tokens(12);
  g.mutable_sampling()->set_ignore_eos(true);
  auto want = Run(server.address(), g);
  REQUIRE(want.ok());
  const Json body = {{"model", "glm-dsa-tiny"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0},
                     {"ignore_eos", true}, {"stream_options", {{"include_usage", true}}}};
  const Json whole = Post(port, "/v1/completions", body);
  CHECK(whole["object"] == "text_completion");
  CHECK(whole["choices"][0]["text"] == want->text());
  CHECK(whole["choices"][0]["finish_reason"] == "length");
  CHECK(whole["usage"]["prompt_tokens"] == want->usage().prompt_tokens());
  CHECK(whole["usage"]["completion_tokens"] == 12);
  CHECK(whole["usage"]["total_tokens"] == want->usage().prompt_tokens() + 12);
  // The prompt again: served from the prompt cache.
  const Json again = Post(port, "/v1/completions", body);
  CHECK(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
  const std::vector<Json> events = PostStream(port, "/v1/completions", body);
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    CHECK(events[i]["object"] == "text_completion");
    CHECK(events[i]["id"] == events[0]["id"]);
    text += events[i]["choices"][0]["text"].get<std::string>();
  }
  CHECK(text == want->text());
  // The last choice chunk has the finish reason; then the usage chunk, with no choices.
  REQUIRE(events.size() >= 3);
  CHECK(events[events.size() - 2]["choices"][0]["finish_reason"] == "length");
  CHECK(events.back()["choices"].empty());
  CHECK(events.back()["usage"]["completion_tokens"] == 12);
  // A stop string ends the text before it; logprobs come with the tokens.
  const std::string cut = want->text().substr(3, 2);
  const Json stopped = Post(port, "/v1/completions",
                            {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true},
                             {"stop", cut}, {"logprobs", 2}});
  CHECK(stopped["choices"][0]["finish_reason"] == "stop");
  CHECK(stopped["choices"][0]["text"] == want->text().substr(0, want->text().find(cut)));
  const Json& lp = stopped["choices"][0]["logprobs"];
  REQUIRE(lp["tokens"].size() >= 1);
  CHECK(lp["tokens"].size() == lp["token_logprobs"].size());
  CHECK(lp["top_logprobs"][0].size() == 2);
}

TEST_CASE("openai: chat splits reasoning and tool calls whole and streamed and takes the results back",
          "[serve][openai]") {
  Server server(kScripted, 1);
  REQUIRE(server.serving());
  const int port = server.http_port();
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "weather",
      "description": "The weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  Json body = {{"model", "glm-dsa-scripted"},
               {"messages", Json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}})},
               {"tools", tools},
               {"max_tokens", 64}};
  const Json whole = Post(port, "/v1/chat/completions", body);
  INFO(whole.dump());
  CHECK(whole["object"] == "chat.completion");
  const Json& message = whole["choices"][0]["message"];
  CHECK(message["role"] == "assistant");
  CHECK(message["reasoning_content"] == kScriptedReasoning);
  CHECK(message["content"].is_null());
  REQUIRE(message["tool_calls"].size() == 1);
  CHECK(message["tool_calls"][0]["type"] == "function");
  CHECK(message["tool_calls"][0]["function"]["name"] == "weather");
  CHECK(message["tool_calls"][0]["function"]["arguments"] == kScriptedCall);
  CHECK(whole["choices"][0]["finish_reason"] == "tool_calls");
  // Streamed: the same, in deltas.
  std::string reasoning;
  Json calls = Json::array();
  std::string finish;
  for (const Json& e : PostStream(port, "/v1/chat/completions", body)) {
    CHECK(e["object"] == "chat.completion.chunk");
    const Json& d = e["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const Json& c : d["tool_calls"]) calls.push_back(c);
    }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  CHECK(reasoning == kScriptedReasoning);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[0]["function"]["arguments"] == kScriptedCall);
  CHECK(finish == "tool_calls");
  // Thinking off: the call alone.
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  const Json off = Post(port, "/v1/chat/completions", body);
  CHECK(off["choices"][0]["message"]["reasoning_content"].is_null());
  CHECK(off["choices"][0]["message"]["tool_calls"].size() == 1);
  // The round trip: the call and its result go back (arguments as the JSON string it came as).
  Json history = body["messages"];
  history.push_back(message);
  history.push_back({{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "Sunny, 21 C"}});
  body["messages"] = history;
  body.erase("chat_template_kwargs");
  const Json second = Post(port, "/v1/chat/completions", body);
  CHECK(second["usage"]["prompt_tokens"].get<int>() > whole["usage"]["prompt_tokens"].get<int>());
  CHECK(second["choices"][0]["message"]["reasoning_content"] == kScriptedReasoning);
  // tool_choice none: the call stays text.
  body["tool_choice"] = "none";
  const Json none = Post(port, "/v1/chat/completions", body);
  CHECK(none["choices"][0]["message"]["tool_calls"].empty());
  CHECK(none["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>weather") == 0);
  // A forced call is refused (it would need constrained decoding).
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "weather"}}}};
  CHECK(Post(port, "/v1/chat/completions", body, 400)["error"]["param"] == "tool_choice");
}

TEST_CASE("openai: a client that goes away ends its request", "[serve][openai]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  const int fd = testing::ConnectLoopback(server.http_port());
  REQUIRE(fd >= 0);
  const std::string body =
      Json{{"prompt", "hi"}, {"max_tokens", 3000}, {"ignore_eos", true}, {"stream", true}}.dump();
  const std::string req = "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  REQUIRE(write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  char buf[4096];
  REQUIRE(read(fd, buf, sizeof(buf)) > 0);  // the stream has started
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  CHECK(info->running_requests() == 1);
  close(fd);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int running = 1;
  while (running > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto now = cli::GetServerInfo(server.address());
    if (now.ok()) running = now->running_requests();
  }
  CHECK(running == 0);
}

TEST_CASE("openai: with an API key file only requests with the key are served", "[serve][openai]") {
  const std::string key_file = testing::TempLog("ferry-api-key");
  {
    std::ofstream(key_file) << "sk-test-123\n";
  }
  chmod(key_file.c_str(), 0600);
  Server server(kDsa, 1, {"--api-key-file", key_file});
  REQUIRE(server.serving());
  const int port = server.http_port();
  const Json body = {{"prompt", "hi"}, {"max_tokens", 1}};
  CHECK(Post(port, "/v1/completions", body, 401)["error"]["code"] == "invalid_api_key");
  CHECK(Post(port, "/v1/completions", body, 401, {"Authorization: Bearer sk-wrong"})["error"]["code"] ==
        "invalid_api_key");
  CHECK(Post(port, "/v1/completions", body, 200, {"Authorization: Bearer sk-test-123"})["choices"].size() == 1);
  CHECK(HttpCall(port, "GET", "/v1/models").status == 401);
  CHECK(HttpCall(port, "GET", "/health").status == 200);
  std::remove(key_file.c_str());
}

}  // namespace
}  // namespace ferry
