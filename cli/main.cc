// `ferry`: the user-facing command line. `ferry <subcommand> [--flags]`.
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/args.h"
#include "common/log.h"
#include "common/version.h"

namespace {

constexpr char kUsage[] =
    "ferry <subcommand> [flags]\n"
    "\n"
    "subcommands:\n"
    "  check-golden --model DIR [--device cpu|cuda] [--precision bf16|f32] [--golden FILE] [--tolerance X] [--prefill-chunk N]\n"
    "               [--pin-decisions=true|false] [--server HOST:PORT]\n"
    "      run every golden prompt (prefill, then greedy decode) and compare with transformers, replaying the\n"
    "      reference's recorded indexer and routing selections; --server: the golden prompts\n"
    "      through a running server's API instead (greedy tokens compared; --model or --golden names the file)\n"
    "  generate --model DIR [--device cpu|cuda] (--prompt-ids 1,2,3 | --prompt TEXT) [--max-tokens N] [--temperature T]\n"
    "           [--top-k K] [--top-p P] [--seed S] [--logprobs N] [--stop-token-ids ...] [--ignore-eos]\n"
    "      generate in-process; prints the new token ids, comma-separated, on stdout (with --logprobs, then a line a\n"
    "      token: its log-probability and the N most likely tokens'); a seed gives the server's tokens. With\n"
    "      --prompt, the text is tokenized with the model's tokenizer.json and the output is text\n"
    "  generate --server HOST:PORT (--prompt-ids 1,2,3 | --prompt TEXT) [--max-tokens N] [sampling flags] [--stream]\n"
    "      the same against a running server (ferry serve)\n"
    "  chat --server HOST:PORT [--system TEXT] [--think] [--max-tokens N] [sampling flags]\n"
    "      a conversation: each stdin line a user turn, rendered by the server with the model's chat template,\n"
    "      the reply streamed to stdout; /think on|off, /reset, /quit\n"
    "  serve --model DIR --ranks N [--port 50051] [--http-port 8000] [--metrics-port 9400] [--host 127.0.0.1]\n"
    "        [--api-key-file FILE]\n"
    "        [--parallel 16] [--max-batch-tokens 256] [--max-queue 64] [--context N]\n"
    "      launch ferry-coordinator and N local ferry-worker ranks; stop them on ^C\n"
    "  plan (--model DIR | --config FILE) --ranks W --context N --parallel P (--memory-gib G [--reserve-gib 28] |\n"
    "       --room-gib G) [--kv-pages auto|on|off] [--page-size 512] [--prompt-cache-gib 16] [--mtp-layers 0]\n"
    "       [--kv-cache bf16|fp8] [--fixed-mib X] [--owner-split auto|on|off]\n"
    "      the weights a rank holds and the KV memory plan it would use (reads config.json only); exits 1 when\n"
    "      refused\n"
    "  quantize --format nvfp4|bf16|f32 [--calibration FILE | --calibration-ids FILE] IN_DIR OUT_DIR\n"
    "      rewrite a checkpoint: nvfp4 quantizes the MLP and expert projections as NVIDIA ModelOpt's NVFP4 (per-16\n"
    "      E4M3 scales, a global scale a tensor; with calibration prompts, the input scales W4A4 kernels need);\n"
    "      bf16/f32 decode every weight (FP8 and NVFP4 included)\n"
    "  version\n"
    "      the release and the source commit of this build (hosts of one cluster must agree)\n"
    "  status --server HOST:PORT [--wait-s N]\n"
    "      whether the server is serving (waiting up to N s for it) and each rank's state; exits 0 serving,\n"
    "      1 not serving (it says why), 2 no answer\n"
    "\n"
    "Dashes and underscores in flag names are interchangeable.";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    fprintf(argc < 2 ? stderr : stdout, "%s\n", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string sub = argv[1];
  if (sub == "version" || sub == "--version") {
    printf("%s\n", ferry::VersionString().c_str());
    return 0;
  }
  std::vector<std::string> args = ferry::NormaliseFlagArgs(argc, argv, /*first=*/2);
  args[0] = std::string(argv[0]) + " " + sub;
  std::vector<char*> cargs = ferry::ArgvOf(args);
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  // quantize is the one subcommand with positional arguments (IN OUT).
  if (sub != "quantize" && rest.size() > 1) {
    fprintf(stderr, "ferry %s: unexpected argument '%s'\n", sub.c_str(), rest[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_verbose)) ferry::SetMinLogLevel(ferry::LogLevel::kDebug);

  if (sub == "chat") return ferry::cli::RunChat();
  if (sub == "check-golden") return ferry::cli::RunCheckGolden();
  if (sub == "generate") return ferry::cli::RunGenerate();
  if (sub == "serve") return ferry::cli::RunServe();
  if (sub == "plan") return ferry::cli::RunPlan();
  if (sub == "quantize") return ferry::cli::RunQuantize(std::vector<std::string>(rest.begin() + 1, rest.end()));
  if (sub == "status") return ferry::cli::RunStatus();
  fprintf(stderr, "ferry: unknown subcommand '%s'\n\n%s\n", sub.c_str(), kUsage);
  return 2;
}
