#include "model/checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace ferry::model {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<TensorInfo> ParseEntry(const std::string& path, const std::string& name,
                                      const nlohmann::json& v, uint64_t data_size) {
  TensorInfo t;
  t.name = name;
  if (!v.is_object()) return Bad(path, absl::StrCat("tensor '", name, "': entry is not an object"));
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) {
    return Bad(path, absl::StrCat("tensor '", name, "': missing string field 'dtype'"));
  }
  auto parsed = ParseDType(dt->get<std::string>());
  if (!parsed) {
    return Bad(path, absl::StrCat("tensor '", name, "': unknown dtype '", dt->get<std::string>(), "'"));
  }
  t.dtype = *parsed;
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) {
    return Bad(path, absl::StrCat("tensor '", name, "': missing array field 'shape'"));
  }
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Bad(path, absl::StrCat("tensor '", name, "': shape ", sh->dump(),
                                    " has a dimension that is not a non-negative integer"));
    }
    t.shape.push_back(d.get<int64_t>());
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return Bad(path, absl::StrCat("tensor '", name,
                                  "': 'data_offsets' must be two non-negative integers"));
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) {
    return Bad(path, absl::StrCat("tensor '", name, "': data_offsets [", t.begin, ", ", t.end,
                                  "] end before they begin"));
  }
  if (t.end > data_size) {
    return Bad(path, absl::StrCat("tensor '", name, "': data_offsets [", t.begin, ", ", t.end,
                                  "] run past the data section of ", data_size, " bytes"));
  }
  // numel * size with overflow checks: a hostile shape must not wrap around.
  unsigned __int128 bytes = static_cast<unsigned __int128>(DTypeSize(t.dtype));
  for (int64_t d : t.shape) {
    bytes *= static_cast<uint64_t>(d);
    if (bytes > (static_cast<unsigned __int128>(1) << 64)) break;
  }
  if (bytes != static_cast<unsigned __int128>(t.end - t.begin)) {
    const std::string need = bytes > UINT64_MAX ? std::string("more than 2^64")
                                                : absl::StrCat(static_cast<uint64_t>(bytes));
    return Bad(path, absl::StrCat("tensor '", name, "': ", DTypeName(t.dtype), " ", t.ShapeString(),
                                  " needs ", need, " bytes but data_offsets [",
                                  t.begin, ", ", t.end, "] hold ", t.end - t.begin));
  }
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile st;
  FERRY_ASSIGN_OR_RETURN(st.file_, MappedFile::Open(path));
  const uint64_t size = st.file_.size();
  if (size < 8) {
    return Bad(path, absl::StrCat("file is ", size, " bytes, too short for the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | st.file_.data()[i];
  if (header_len > size - 8) {
    return Bad(path, absl::StrCat("header length ", header_len, " runs past the end of the file (",
                                  size, " bytes, ", size - 8, " after the length)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header length ", header_len, " exceeds the ", kMaxHeaderBytes,
                                  "-byte limit"));
  }
  const char* header = reinterpret_cast<const char*>(st.file_.data() + 8);
  nlohmann::json j = nlohmann::json::parse(header, header + header_len, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(path, absl::StrCat("malformed header JSON (", header_len, " bytes)"));
  if (!j.is_object()) return Bad(path, "header JSON is not an object");

  st.data_ = st.file_.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Bad(path, "'__metadata__' is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Bad(path, absl::StrCat("'__metadata__' value of '", m.key(), "' is not a string"));
        }
        st.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(TensorInfo t, ParseEntry(path, it.key(), *it, data_size));
    st.tensors_.push_back(std::move(t));
  }
  std::sort(st.tensors_.begin(), st.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < st.tensors_.size(); ++i) {
    const TensorInfo& prev = st.tensors_[i - 1];
    const TensorInfo& cur = st.tensors_[i];
    if (cur.begin < prev.end) {
      return Bad(path, absl::StrCat("tensors '", prev.name, "' [", prev.begin, ", ", prev.end,
                                    ") and '", cur.name, "' [", cur.begin, ", ", cur.end,
                                    ") overlap"));
    }
  }
  // The format has the tensors fill the data section back to back: no hole, nothing after.
  uint64_t at = 0;
  for (const TensorInfo& t : st.tensors_) {
    if (t.begin != at) {
      return Bad(path, absl::StrCat("bytes [", at, ", ", t.begin, ") of the data section belong to no tensor (before '",
                                    t.name, "')"));
    }
    at = t.end;
  }
  if (at != data_size) {
    return Bad(path, absl::StrCat("bytes [", at, ", ", data_size, ") of the data section belong to no tensor (",
                                  data_size - at, " trailing bytes)"));
  }
  for (size_t i = 0; i < st.tensors_.size(); ++i) st.index_[st.tensors_[i].name] = i;
  return st;
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TensorBytes& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (static_cast<uint64_t>(numel * DTypeSize(t.dtype)) != t.bytes.size()) {
      return Bad(path, absl::StrCat("tensor '", t.name, "': ", t.bytes.size(), " bytes for ", DTypeName(t.dtype), " [",
                                    absl::StrJoin(t.shape, ", "), "]"));
    }
    if (header.contains(t.name)) return Bad(path, absl::StrCat("tensor '", t.name, "' given twice"));
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const TensorBytes& t : tensors) ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
