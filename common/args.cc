#include "common/args.h"

namespace ferry {

std::vector<std::string> NormaliseFlagArgs(int argc, char** argv, int first) {
  std::vector<std::string> out;
  out.emplace_back(argc > 0 ? argv[0] : "ferry");
  for (int i = first; i < argc; ++i) {
    std::string s(argv[i]);
    if (s.rfind("--", 0) == 0) {
      size_t end = s.find('=');
      if (end == std::string::npos) end = s.size();
      for (size_t k = 2; k < end; ++k) {
        if (s[k] == '-') s[k] = '_';
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<char*> ArgvOf(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (std::string& a : args) out.push_back(a.data());
  return out;
}

}  // namespace ferry
