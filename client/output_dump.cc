#include "client/output_dump.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace metalserve::client {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

float HalfToFloat(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string Num(double v, int digits) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return absl::StrFormat("%.*g", digits, v);
}

// Item size and a formatter for one element, or 0 for an unknown datatype.
int64_t ItemOf(const std::string& dt) {
  if (dt == "FP32" || dt == "INT32") return 4;
  if (dt == "FP64" || dt == "INT64") return 8;
  if (dt == "FP16" || dt == "BF16") return 2;
  if (dt == "UINT8" || dt == "INT8" || dt == "BOOL") return 1;
  return 0;
}

std::string Element(const std::string& dt, const char* p) {
  if (dt == "FP32") return Num(Load<float>(p), 9);
  if (dt == "FP64") return Num(Load<double>(p), 17);
  if (dt == "FP16") return Num(HalfToFloat(Load<uint16_t>(p)), 9);
  if (dt == "BF16") return Num(Bf16ToFloat(Load<uint16_t>(p)), 9);
  if (dt == "INT64") return absl::StrCat(Load<int64_t>(p));
  if (dt == "INT32") return absl::StrCat(Load<int32_t>(p));
  if (dt == "INT8") return absl::StrCat(Load<int8_t>(p));
  if (dt == "UINT8") return absl::StrCat(Load<uint8_t>(p));
  return *p != 0 ? "true" : "false";  // BOOL
}

}  // namespace

absl::Status OutputsJson(const std::vector<DumpedTensor>& outputs, std::string* json) {
  std::string out = "{\"outputs\":[";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const DumpedTensor& t = outputs[i];
    const int64_t item = ItemOf(t.datatype);
    if (item == 0 || static_cast<int64_t>(t.data.size()) % item != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", t.name, "': ", t.data.size(), " bytes of datatype '",
          t.datatype, "' cannot be decoded"));
    }
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"name\":\"", t.name, "\",\"datatype\":\"", t.datatype,
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data\":[");
    for (size_t off = 0; off < t.data.size(); off += item) {
      if (off > 0) out += ",";
      out += Element(t.datatype, t.data.data() + off);
    }
    out += "]}";
  }
  out += "]}\n";
  *json = std::move(out);
  return absl::OkStatus();
}

absl::Status WriteOutputsJson(const std::vector<DumpedTensor>& outputs,
                              const std::string& path) {
  std::string json;
  absl::Status s = OutputsJson(outputs, &json);
  if (!s.ok()) return s;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << json;
  f.close();
  if (!f) {
    return absl::UnavailableError(absl::StrCat("--dump_outputs='", path,
                                               "' cannot be written"));
  }
  return absl::OkStatus();
}

}  // namespace metalserve::client
