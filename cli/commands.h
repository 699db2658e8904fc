// The subcommands of `ferry`. Each reads its options from the flag table (cli/flags.h) and
// returns the process exit code: 0 success, 1 a failed check, 2 bad usage or input.
#pragma once

namespace ferry::cli {

int RunChat();
int RunCheckGolden();
int RunGenerate();
int RunServe();
int RunPlan();
int RunStatus();

}  // namespace ferry::cli
