// The subcommands of `ferry`. Each reads its options from the flag table (cli/flags.h) and
// returns the process exit code: 0 success, 1 a failed check, 2 bad usage or input.
#pragma once

#include <string>
#include <vector>

namespace ferry::cli {

int RunChat();
int RunCheckGolden();
int RunGenerate();
int RunServe();
int RunPlan();
int RunQuantize(const std::vector<std::string>& args);
int RunStatus();

}  // namespace ferry::cli
