#include "server/runtime/model_signature.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/status_macros.h"

namespace metalserve {
namespace {

// Just enough JSON for the sidecar: objects, arrays, strings (simple
// escapes), numbers, true/false/null.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
};

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<Json> ParseDocument() {
    ASSIGN_OR_RETURN(Json v, ParseValue(0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("signature JSON: ", what, " at offset ", pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; }
    return false;
  }

  absl::StatusOr<Json> ParseValue(int depth) {
    if (depth > 32) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    const char c = s_[pos_];
    Json v;
    if (c == '{') {
      ++pos_;
      v.kind = Json::kObject;
      if (Consume('}')) return v;
      do {
        SkipSpace();
        ASSIGN_OR_RETURN(std::string key, ParseString());
        if (!Consume(':')) return Error("expected ':'");
        ASSIGN_OR_RETURN(v.fields[key], ParseValue(depth + 1));
      } while (Consume(','));
      if (!Consume('}')) return Error("expected '}'");
    } else if (c == '[') {
      ++pos_;
      v.kind = Json::kArray;
      if (Consume(']')) return v;
      do {
        ASSIGN_OR_RETURN(Json item, ParseValue(depth + 1));
        v.items.push_back(std::move(item));
      } while (Consume(','));
      if (!Consume(']')) return Error("expected ']'");
    } else if (c == '"') {
      v.kind = Json::kString;
      ASSIGN_OR_RETURN(v.str, ParseString());
    } else if (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false") {
      v.kind = Json::kBool;
      v.number = s_[pos_] == 't';
      pos_ += s_[pos_] == 't' ? 4 : 5;
    } else if (s_.substr(pos_, 4) == "null") {
      pos_ += 4;
    } else {
      const std::string rest(s_.substr(pos_, 64));
      char* end = nullptr;
      v.number = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) return Error("unexpected character");
      v.kind = Json::kNumber;
      pos_ += end - rest.c_str();
    }
    return v;
  }

  absl::StatusOr<std::string> ParseString() {
    if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) break;
        c = s_[pos_++];
        if (c == 'n') c = '\n';
        else if (c == 't') c = '\t';
        else if (c != '"' && c != '\\' && c != '/') return Error("unsupported escape");
      }
      out.push_back(c);
    }
    if (pos_ >= s_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

// Every name ParseDType (server/common/tensor.cc) accepts; docs/signature.md
// lists the same.
constexpr const char* kAcceptedDtypes =
    "float32 (fp32, float), float16 (fp16, half), bfloat16 (bf16), "
    "float64 (fp64, double), int64, int32, uint8, int8, bool";

absl::StatusOr<std::vector<TensorSpec>> ParseSpecs(const Json& root,
                                                   const std::string& key) {
  auto it = root.fields.find(key);
  if (it == root.fields.end() || it->second.kind != Json::kArray ||
      it->second.items.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("signature JSON: '", key, "' must be a non-empty list"));
  }
  std::vector<TensorSpec> specs;
  for (const Json& item : it->second.items) {
    const std::string field = absl::StrCat(key, "[", specs.size(), "]");
    const auto name = item.fields.find("name");
    const auto dtype = item.fields.find("dtype");
    const auto shape = item.fields.find("shape");
    if (item.kind != Json::kObject || name == item.fields.end() ||
        dtype == item.fields.end() || shape == item.fields.end() ||
        shape->second.kind != Json::kArray) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signature JSON: ", field, " needs \"name\", \"dtype\" and \"shape\" (a list)"));
    }
    TensorSpec spec;
    spec.name = name->second.str;
    absl::StatusOr<DType> parsed = ParseDType(dtype->second.str);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signature JSON: ", field, ".dtype: ", parsed.status().message(),
          "; accepted: ", kAcceptedDtypes));
    }
    spec.dtype = *parsed;
    for (const Json& d : shape->second.items) {
      spec.shape.push_back(static_cast<int64_t>(d.number));
    }
    if (spec.shape.empty() || spec.shape[0] != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signature JSON: ", field, ".shape ", ShapeToString(spec.shape),
          " ('", spec.name, "') must start with the batch dimension -1"));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string Quoted(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string SpecsToJson(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> items;
  for (const TensorSpec& t : specs) {
    items.push_back(absl::StrCat("    {\"name\": ", Quoted(t.name), ", \"dtype\": \"",
                                 DTypeName(t.dtype), "\", \"shape\": [",
                                 absl::StrJoin(t.shape, ", "), "]}"));
  }
  return absl::StrCat("[\n", absl::StrJoin(items, ",\n"), "\n  ]");
}

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

std::string SignatureToJson(const ModelSignature& sig) {
  return absl::StrCat("{\n  \"name\": ", Quoted(sig.name), ",\n  \"version\": ",
                      Quoted(sig.version.empty() ? "1" : sig.version),
                      ",\n  \"inputs\": ", SpecsToJson(sig.inputs),
                      ",\n  \"outputs\": ", SpecsToJson(sig.outputs), "\n}\n");
}

absl::StatusOr<ModelSignature> ParseModelSignature(absl::string_view json) {
  ASSIGN_OR_RETURN(Json root, Parser(json).ParseDocument());
  if (root.kind != Json::kObject) {
    return absl::InvalidArgumentError("signature JSON: top level is not an object");
  }
  ModelSignature sig;
  if (auto it = root.fields.find("name"); it != root.fields.end()) sig.name = it->second.str;
  if (auto it = root.fields.find("version"); it != root.fields.end()) sig.version = it->second.str;
  ASSIGN_OR_RETURN(sig.inputs, ParseSpecs(root, "inputs"));
  ASSIGN_OR_RETURN(sig.outputs, ParseSpecs(root, "outputs"));
  return sig;
}

absl::StatusOr<ModelSignature> ReadModelSignature(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read model signature ", path));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<ModelSignature> sig = ParseModelSignature(buf.str());
  if (!sig.ok()) {
    return absl::Status(sig.status().code(),
                        absl::StrCat(path, ": ", sig.status().message()));
  }
  return sig;
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
