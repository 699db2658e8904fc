#include "common/status.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace ferry {

absl::Status WithContext(absl::string_view context, const absl::Status& st) {
  if (st.ok()) return st;
  absl::Status out(st.code(), absl::StrCat(context, ": ", st.message()));
  st.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace ferry
