// `ferry chat --server HOST:PORT`: a conversation with a running server, a line of stdin a user
// turn, the reply streamed to stdout as it is generated. The server renders the conversation
// with the model's chat template; the client keeps the history (each reply as the model wrote
// it: the template drops or keeps past reasoning as the model family does).
//
// Lines starting with '/' are commands: /think on|off (the enable_thinking template variable),
// /reset (forget the history), /quit (or end of input).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace ferry::cli {

int RunChat() {
  const std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) {
    fprintf(stderr, "ferry chat: give --server HOST:PORT (a running ferry serve)\n");
    return 2;
  }
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  const std::string system = absl::GetFlag(FLAGS_system);
  if (!system.empty()) history.push_back({{"role", "system"}, {"content", system}});
  bool think = absl::GetFlag(FLAGS_think);
  const bool interactive = isatty(STDIN_FILENO) != 0;
  int failures = 0;
  std::string line;
  for (;;) {
    if (interactive) {
      fprintf(stderr, "> ");
      fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      history.erase(history.begin() + (system.empty() ? 0 : 1), history.end());
      fprintf(stderr, "(history cleared)\n");
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      think = line == "/think on";
      fprintf(stderr, "(thinking %s)\n", think ? "on" : "off");
      continue;
    }
    if (line[0] == '/') {
      fprintf(stderr, "commands: /think on|off, /reset, /quit\n");
      continue;
    }
    history.push_back({{"role", "user"}, {"content", line}});
    ferry::v1::GenerateRequest req;
    req.mutable_chat()->set_messages_json(history.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    req.mutable_chat()->set_template_kwargs_json(nlohmann::ordered_json{{"enable_thinking", think}}.dump());
    ferry::v1::SamplingParams* sp = req.mutable_sampling();
    sp->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
    sp->set_top_k(absl::GetFlag(FLAGS_top_k));
    sp->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
    if (absl::GetFlag(FLAGS_seed) != 0) sp->set_seed(absl::GetFlag(FLAGS_seed));
    // Replies run to the end of the turn (or the context) unless --max-tokens bounds them (generate's
    // default bound does not apply here).
    if (const absl::CommandLineFlag* f = absl::FindCommandLineFlag("max_tokens");
        f != nullptr && f->CurrentValue() != f->DefaultValue()) {
      sp->set_max_tokens(static_cast<int32_t>(absl::GetFlag(FLAGS_max_tokens)));
    }
    req.set_stream(true);
    std::string reply;
    auto res = GenerateRemote(server, req,
                              std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000)),
                              [&](const ferry::v1::TokenChunk& c) {
                                reply += c.text();
                                printf("%s", c.text().c_str());
                                fflush(stdout);
                              });
    if (!res.ok()) {
      printf("\n");
      fprintf(stderr, "ferry chat: %s\n", std::string(res.status().message()).c_str());
      history.erase(history.end() - 1);  // the turn did not happen
      ++failures;
      continue;
    }
    reply += res->text();
    printf("%s\n", res->text().c_str());
    fflush(stdout);
    history.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace ferry::cli
