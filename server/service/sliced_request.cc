#include "server/service/sliced_request.h"

#include <cstdint>
#include <string>

namespace metalserve {
namespace {

constexpr uint32_t kInputsField = 2;  // PredictRequest.inputs
constexpr uint32_t kDataField = 4;    // Tensor.data
constexpr uint32_t kRawInputContentsField = 7;  // ModelInferRequest.raw_input_contents
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// A cursor over the slices. Bytes read can be recorded into a sink.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    Settle();
  }
  size_t position() const { return pos_; }
  bool AtEnd() const { return index_ == slices_.size(); }
  void set_sink(std::string* sink) { sink_ = sink; }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = slices_[index_].begin()[offset_];
    if (sink_ != nullptr) sink_->push_back(static_cast<char>(*b));
    ++offset_;
    ++pos_;
    Settle();
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // A tag or a length as protobuf reads them: at most 5 bytes and at most
  // `max`. Protobuf refuses longer encodings, so the walk must too (a body
  // protobuf refuses is left to the ordinary parse, which answers it).
  bool ReadVarint32(uint64_t* v, uint64_t max) {
    *v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return *v <= max;
    }
    return false;
  }
  bool ReadTag(uint64_t* v) { return ReadVarint32(v, 0xffffffffu); }
  bool ReadLength(uint64_t* v) { return ReadVarint32(v, 0x7fffffffu); }

  // Moves past `n` bytes, appending them to the sink, or as views to `views`.
  bool Skip(uint64_t n, std::vector<absl::string_view>* views) {
    while (n > 0) {
      if (AtEnd()) return false;
      const grpc::Slice& s = slices_[index_];
      const size_t take = std::min<uint64_t>(n, s.size() - offset_);
      const char* p = reinterpret_cast<const char*>(s.begin()) + offset_;
      if (views != nullptr) {
        views->emplace_back(p, take);
      } else if (sink_ != nullptr) {
        sink_->append(p, take);
      }
      offset_ += take;
      pos_ += take;
      n -= take;
      Settle();
    }
    return true;
  }

 private:
  void Settle() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t pos_ = 0;
  std::string* sink_ = nullptr;
};

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Moves past one field's value of wire type `type` (recorded by the sink).
bool SkipValue(SliceReader* r, uint32_t type) {
  uint64_t v;
  switch (type) {
    case kVarint: return r->ReadVarint(&v);
    case kFixed64: return r->Skip(8, nullptr);
    case kFixed32: return r->Skip(4, nullptr);
    case kLengthDelimited: return r->ReadLength(&v) && r->Skip(v, nullptr);
    default: return false;  // groups and invalid types: the ordinary parse decides
  }
}

// One Tensor of `length` bytes: its fields but data into `tensor`, data as
// views into `data` (the last data field wins, as in protobuf).
bool ReadTensor(SliceReader* r, uint64_t length, std::string* tensor,
                std::vector<absl::string_view>* data) {
  const size_t end = r->position() + length;
  while (r->position() < end) {
    std::string field;
    r->set_sink(&field);
    uint64_t tag;
    if (!r->ReadTag(&tag)) return false;
    const uint32_t type = tag & 7;
    if ((tag >> 3) == kDataField && type == kLengthDelimited) {
      uint64_t n;
      if (!r->ReadLength(&n)) return false;
      r->set_sink(nullptr);
      data->clear();
      if (r->position() + n > end || !r->Skip(n, data)) return false;
      continue;
    }
    if (!SkipValue(r, type) || r->position() > end) return false;
    tensor->append(field);
  }
  r->set_sink(nullptr);
  return r->position() == end;
}

// Takes `body`'s length from `budget` and references its slices in `out`;
// false when the budget has no room or the slices cannot be had.
bool HoldSlices(const grpc::ByteBuffer& body, HeldBytesBudget* budget, HeldSlices* out) {
  const int64_t length = static_cast<int64_t>(body.Length());
  if (budget == nullptr || !budget->TryTake(length)) return false;
  out->budget = budget;
  out->held_bytes = length;
  return body.Dump(&out->slices).ok();
}

// Walks the top level of a message in `r`: every field is copied into
// `skeleton` as read, except length-delimited fields numbered `taken`, whose
// tag and length are given to `take(tag, length)` with the reader at the
// value; `take` reads the value and returns false when it is malformed.
// False on a malformed field (the ordinary parse then decides).
template <typename Take>
bool WalkTopLevel(SliceReader* r, uint32_t taken, std::string* skeleton, Take take) {
  while (!r->AtEnd()) {
    std::string field;
    r->set_sink(&field);
    uint64_t tag;
    if (!r->ReadTag(&tag)) return false;
    const uint32_t type = tag & 7;
    if ((tag >> 3) == taken && type == kLengthDelimited) {
      uint64_t length;
      if (!r->ReadLength(&length)) return false;
      r->set_sink(nullptr);
      if (!take(tag, length)) return false;
      continue;
    }
    if (!SkipValue(r, type)) return false;
    r->set_sink(nullptr);
    skeleton->append(field);
  }
  return true;
}

}  // namespace

bool ParseSlicedPredictRequest(const grpc::ByteBuffer& body, HeldBytesBudget* budget,
                               SlicedPredictRequest* out) {
  if (!HoldSlices(body, budget, out)) return false;
  SliceReader r(out->slices);
  std::string skeleton;
  const bool walked = WalkTopLevel(&r, kInputsField, &skeleton, [&](uint64_t tag, uint64_t length) {
    // The tensor without its data goes into the skeleton, the data stays views.
    std::string tensor;
    out->data.emplace_back();
    if (!ReadTensor(&r, length, &tensor, &out->data.back())) return false;
    AppendVarint(tag, &skeleton);
    AppendVarint(tensor.size(), &skeleton);
    skeleton.append(tensor);
    return true;
  });
  return walked && out->skeleton.ParseFromString(skeleton) &&
         out->skeleton.inputs_size() == static_cast<int>(out->data.size());
}

bool ParseSlicedModelInferRequest(const grpc::ByteBuffer& body, HeldBytesBudget* budget,
                                  SlicedModelInferRequest* out) {
  if (!HoldSlices(body, budget, out)) return false;
  SliceReader r(out->slices);
  std::string skeleton;
  const bool walked =
      WalkTopLevel(&r, kRawInputContentsField, &skeleton, [&](uint64_t, uint64_t length) {
        out->raw_input_contents.emplace_back();
        return r.Skip(length, &out->raw_input_contents.back());
      });
  return walked && out->skeleton.ParseFromString(skeleton);
}

}  // namespace metalserve
