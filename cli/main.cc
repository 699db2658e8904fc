// `ferry`: the user-facing command line. `ferry <subcommand> [--flags]`.
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/log.h"

namespace {

constexpr char kUsage[] =
    "ferry <subcommand> [flags]\n"
    "\n"
    "subcommands:\n"
    "  check-golden --model DIR [--golden FILE] [--tolerance X] [--prefill-chunk N]\n"
    "      run every golden prompt (prefill, then greedy decode) and compare with transformers\n"
    "  generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--temperature T] [--top-k K]\n"
    "           [--top-p P] [--seed S] [--stop-token-ids ...] [--ignore-eos]\n"
    "      generate in-process; prints the new token ids, comma-separated, on stdout\n"
    "  plan (--model DIR | --config FILE) --ranks W --context N --parallel P --room-gib G\n"
    "       [--kv-pages auto|on|off] [--page-size 512] [--cache-gib 16] [--mtp-layers 0]\n"
    "       [--kv-cache bf16|fp8] [--fixed-mib X]\n"
    "      the KV memory plan a rank would use (reads config.json only); exits 1 when refused\n"
    "\n"
    "Dashes and underscores in flag names are interchangeable.";

// absl flag names use underscores; accept the dashed spelling users type (--max-tokens).
std::string NormaliseFlag(const char* arg) {
  std::string s(arg);
  if (s.rfind("--", 0) != 0) return s;
  size_t end = s.find('=');
  if (end == std::string::npos) end = s.size();
  for (size_t i = 2; i < end; ++i) {
    if (s[i] == '-') s[i] = '_';
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    fprintf(argc < 2 ? stderr : stdout, "%s\n", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string sub = argv[1];
  std::vector<std::string> args{std::string(argv[0]) + " " + sub};
  for (int i = 2; i < argc; ++i) args.push_back(NormaliseFlag(argv[i]));
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (rest.size() > 1) {
    fprintf(stderr, "ferry %s: unexpected argument '%s'\n", sub.c_str(), rest[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_verbose)) ferry::SetMinLogLevel(ferry::LogLevel::kDebug);

  if (sub == "check-golden") return ferry::cli::RunCheckGolden();
  if (sub == "generate") return ferry::cli::RunGenerate();
  if (sub == "plan") return ferry::cli::RunPlan();
  fprintf(stderr, "ferry: unknown subcommand '%s'\n\n%s\n", sub.c_str(), kUsage);
  return 2;
}
