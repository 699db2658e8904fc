// A small logging helper (abseil 2022 LTS has no absl/log). Lines go to stderr with a level tag
// and the source location; stdout stays free for a command's real output.
//
//   FERRY_LOG(INFO) << "loaded " << n << " tensors";
//
// Thread safety: each line is formatted privately and written with one call, so lines from
// several threads do not interleave.
#pragma once

#include <sstream>

namespace ferry {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  template <typename T>
  LogLine& operator<<(const T& value) {
    if (enabled_) stream_ << value;
    return *this;
  }

 private:
  bool enabled_;
  std::ostringstream stream_;
};

}  // namespace ferry

#define FERRY_LOG_LEVEL_DEBUG ::ferry::LogLevel::kDebug
#define FERRY_LOG_LEVEL_INFO ::ferry::LogLevel::kInfo
#define FERRY_LOG_LEVEL_WARNING ::ferry::LogLevel::kWarning
#define FERRY_LOG_LEVEL_ERROR ::ferry::LogLevel::kError
#define FERRY_LOG(level) ::ferry::LogLine(FERRY_LOG_LEVEL_##level, __FILE__, __LINE__)
