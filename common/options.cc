#include "common/options.h"

#include "absl/flags/reflection.h"

namespace ferry {

std::vector<std::string> ForwardedOptions(std::initializer_list<const char*> names) {
  std::vector<std::string> args;
  for (const char* name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr) args.push_back(std::string("--") + name + "=" + flag->CurrentValue());
  }
  return args;
}

}  // namespace ferry
