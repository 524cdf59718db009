#include "client/output_dump.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/half_float.h"
#include "nlohmann/json.hpp"

namespace metalserve::client {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

using Json = nlohmann::ordered_json;

// `v` as a JSON number: whole values below 10^digits without a fraction
// ("6", not "6.0", as printf's %g), others through the double nearest their
// `digits`-significant-digit decimal, which the library prints in its
// shortest round-trip form: for a float widened to double (digits 9) that
// is those 9 digits at most, not the widened double's 17. NaN and the
// infinities, which JSON has no numbers for, as strings.
Json Num(double v, int digits) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (std::fabs(v) < std::pow(10.0, digits) && v == std::trunc(v)) {
    return static_cast<int64_t>(v);
  }
  double d = v;
  if (!absl::SimpleAtod(absl::StrFormat("%.*g", digits, v), &d)) d = v;
  return d;
}

// Item size, or 0 for an unknown datatype.
int64_t ItemOf(const std::string& dt) {
  if (dt == "FP32" || dt == "INT32") return 4;
  if (dt == "FP64" || dt == "INT64") return 8;
  if (dt == "FP16" || dt == "BF16") return 2;
  if (dt == "UINT8" || dt == "INT8" || dt == "BOOL") return 1;
  return 0;
}

Json Element(const std::string& dt, const char* p) {
  if (dt == "FP32") return Num(Load<float>(p), 9);
  if (dt == "FP64") return Num(Load<double>(p), 17);
  if (dt == "FP16") return Num(HalfToFloat(Load<uint16_t>(p)), 9);
  if (dt == "BF16") return Num(BFloat16ToFloat(Load<uint16_t>(p)), 9);
  if (dt == "INT64") return Load<int64_t>(p);
  if (dt == "INT32") return Load<int32_t>(p);
  if (dt == "INT8") return Load<int8_t>(p);
  if (dt == "UINT8") return Load<uint8_t>(p);
  return *p != 0;  // BOOL
}

}  // namespace

absl::Status OutputsJson(const std::vector<DumpedTensor>& outputs, std::string* json) {
  Json list = Json::array();
  for (const DumpedTensor& t : outputs) {
    const int64_t item = ItemOf(t.datatype);
    if (item == 0 || static_cast<int64_t>(t.data.size()) % item != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", t.name, "': ", t.data.size(), " bytes of datatype '",
          t.datatype, "' cannot be decoded"));
    }
    Json data = Json::array();
    for (size_t off = 0; off < t.data.size(); off += item) {
      data.push_back(Element(t.datatype, t.data.data() + off));
    }
    Json o;
    o["name"] = t.name;
    o["datatype"] = t.datatype;
    o["shape"] = t.shape;
    o["data"] = std::move(data);
    list.push_back(std::move(o));
  }
  Json doc;
  doc["outputs"] = std::move(list);
  // A name that is not UTF-8 is written with U+FFFD rather than failing.
  *json = doc.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
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
