// deploy/grafana/ferry.json against a running cluster: Debian's prometheus scrapes `ferry serve`
// (the coordinator and both workers, the owner split on) while requests run, and every query of
// every dashboard panel, evaluated through Prometheus' HTTP API, returns data.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/files.h"
#include "tests/testing/server_process.h"

namespace ferry::serve_test {
namespace {

using testing::HttpGet;
using testing::Process;
using testing::Server;

constexpr char kPrometheus[] = "/usr/bin/prometheus";  // scripts/install-deps.sh installs it

std::string UrlEncode(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A panel query as Prometheus takes it: Grafana's variables given values.
std::string Resolve(std::string expr) {
  for (auto [var, value] : {std::pair<std::string, std::string>{"$__rate_interval", "1m"}, {"$model_name", ".*"}}) {
    for (size_t at = expr.find(var); at != std::string::npos; at = expr.find(var, at + value.size())) {
      expr.replace(at, var.size(), value);
    }
  }
  return expr;
}

// Whether an instant query's result holds a finite sample; `why` says what came back otherwise.
bool HasData(const nlohmann::json& answer, std::string* why) {
  if (answer.value("status", "") != "success") {
    *why = answer.dump();
    return false;
  }
  for (const auto& series : answer["data"]["result"]) {
    const std::string v = series["value"][1].get<std::string>();
    if (v != "NaN" && v != "+Inf" && v != "-Inf") return true;
  }
  *why = "no finite sample: " + answer["data"].dump();
  return false;
}

TEST_CASE("monitoring: every dashboard panel's query returns data from Prometheus scraping a cluster",
          "[serve][monitoring]") {
  REQUIRE(access(kPrometheus, X_OK) == 0);  // installed by scripts/install-deps.sh
  std::ifstream in(std::string(FERRY_SOURCE_DIR) + "/deploy/grafana/ferry.json");
  REQUIRE(in.good());
  const nlohmann::json dashboard = nlohmann::json::parse(in);

  Server server(kDsa, 2, {"--owner-split", "on", "--page-size", "16", "--context", "256"});
  REQUIRE(server.serving());
  const int m = server.metrics_port();
  testing::TempDir dir;
  const int prom_port = testing::FreePort();
  {
    std::ofstream conf(dir.File("prometheus.yml"));
    conf << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
         << "  - job_name: ferry-coordinator\n    static_configs:\n      - targets: ['127.0.0.1:" << m << "']\n"
         << "  - job_name: ferry-worker\n    static_configs:\n      - targets: ['127.0.0.1:" << m + 1 << "', '127.0.0.1:"
         << m + 2 << "']\n";
  }
  const std::string log = testing::TempLog("prometheus");
  Process prometheus({kPrometheus, "--config.file=" + dir.File("prometheus.yml"), "--storage.tsdb.path=" + dir.File("data"),
                      "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
                     log);
  INFO(prometheus.Log());
  REQUIRE(Eventually([&] { return HttpGet(prom_port, "/-/ready").find("Ready") != std::string::npos; }, 30000));

  // Traffic for a while: prompts that repeat (prefix-cache hits) and cross pages (the owner
  // split's exchanges), scraped every second.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  int requests = 0;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40 + (requests % 3) * 10; ++i) prompt.push_back(3 + (i * 7 + requests % 2) % 300);
    // A fresh channel whose connection fails answers UNAVAILABLE before the server sees the
    // request (serve_client.h): asked again, as a client would.
    auto r = Run(server.address(), Greedy(prompt, 12));
    for (int again = 0; again < 2 && r.status().code() == absl::StatusCode::kUnavailable; ++again) {
      r = Run(server.address(), Greedy(prompt, 12));
    }
    INFO("request " << requests << ": " << r.status().ToString());
    REQUIRE(r.ok());
    ++requests;
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the last scrapes

  int queries = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = Resolve(target["expr"].get<std::string>());
      INFO(panel["title"].get<std::string>() << ": " << expr);
      const std::string body = HttpGet(prom_port, "/api/v1/query?query=" + UrlEncode(expr));
      REQUIRE_FALSE(body.empty());
      std::string why;
      CHECK(HasData(nlohmann::json::parse(body), &why));
      INFO(why);
      ++queries;
    }
  }
  CHECK(queries >= 16);
  CHECK(requests > 5);
}

}  // namespace
}  // namespace ferry::serve_test
