#include "server/runtime/model_signature.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace metalserve {
namespace {

// "NAME=value" items of a comma list; an item without '=' continues the
// previous one (a shape's further dimensions). Values keep their commas.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitNamed(
    absl::string_view list, absl::string_view what) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      if (out.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " '", list, "': '", item, "' has no NAME= before it"));
      }
      absl::StrAppend(&out.back().second, ",", item);
      continue;
    }
    const std::string name(absl::StripAsciiWhitespace(item.substr(0, eq)));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", list, "': '", item, "' has an empty name"));
    }
    for (const auto& [seen, unused] : out) {
      if (seen == name) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", list, "': input '", name, "' is given twice"));
      }
    }
    out.emplace_back(name, std::string(item.substr(eq + 1)));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::vector<int64_t>>> ParseInputShapes(
    absl::string_view list) {
  ASSIGN_OR_RETURN(auto items, SplitNamed(list, "input_shape"));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, value] : items) {
    std::vector<int64_t>& dims = shapes[name];
    for (absl::string_view d : absl::StrSplit(value, ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input_shape '", list, "': input '", name, "' dimension '", d,
            "' is not a positive integer (give the dimensions after the batch "
            "dimension, e.g. ", name, "=3,224,224)"));
      }
      dims.push_back(v);
    }
  }
  return shapes;
}

absl::StatusOr<std::map<std::string, DType>> ParseInputDtypes(absl::string_view list) {
  ASSIGN_OR_RETURN(auto items, SplitNamed(list, "input_dtype"));
  std::map<std::string, DType> dtypes;
  for (const auto& [name, value] : items) {
    absl::StatusOr<DType> d = ParseDType(value);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_dtype '", list, "': input '", name, "': ", d.status().message(),
          " (see docs/signature.md for the dtype names)"));
    }
    dtypes[name] = *d;
  }
  return dtypes;
}

std::string DefaultSignaturePath(absl::string_view model_path) {
  const size_t slash = model_path.find_last_of('/');
  const size_t dot = model_path.find_last_of('.');
  if (dot == absl::string_view::npos ||
      (slash != absl::string_view::npos && dot < slash)) {
    return absl::StrCat(model_path, ".json");
  }
  return absl::StrCat(model_path.substr(0, dot), ".json");
}

}  // namespace metalserve
