// The KServe system shared-memory extension: SharedMemoryRegions on real
// POSIX shared-memory objects (registration checks, views that outlive their
// registration, an object truncated under a mapped region), and the
// extension's RPCs and ModelInfer's shared-memory inputs over real gRPC on
// 127.0.0.1 and a Unix socket, with the fake runner (output = 2 * input).
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/service/kserve_codec.h"
#include "server/service/server.h"
#include "server/service/shared_memory.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/metric_sample.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::metalserve::testing::FakeRunnerServerTest;
using ::metalserve::testing::Floats;
using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kW = FakeRunner::kWidth;

// A POSIX shared-memory object of `bytes` bytes and mode `mode`, as a
// client makes one; unlinked when destroyed. Written through a mapping
// (macOS has no write() on these objects).
class ShmObject {
 public:
  explicit ShmObject(size_t bytes, mode_t mode = 0644) : bytes_(bytes) {
    static std::atomic<int> next{0};
    key_ = absl::StrCat("/ms-test-", getpid(), "-", next++);  // short: macOS allows 31
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, mode);
    EXPECT_GE(fd_, 0) << key_ << ": " << std::strerror(errno);
#ifdef __linux__
    EXPECT_EQ(fchmod(fd_, mode), 0);  // past the umask (macOS has none here, and no fchmod)
#endif
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  // Shrinks the object (Linux; macOS fixes an object's size once set).
  void Resize(size_t bytes) { EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0); }
  void Write(size_t offset, const void* data, size_t n) {
    void* map = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
    std::memcpy(static_cast<char*>(map) + offset, data, n);
    munmap(map, bytes_);
  }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  size_t bytes_;
  int fd_ = -1;
};

#ifdef __linux__
#define SKIP_UNLESS_LINUX(why)
#else
#define SKIP_UNLESS_LINUX(why) GTEST_SKIP() << why
#endif

std::vector<float> Values(int64_t rows, float first) {
  std::vector<float> v(rows * kW);
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + static_cast<float>(i);
  return v;
}

TEST(SharedMemoryRegionsTest, ViewsTheRegisteredRangeOfAnObjectAtAnyOffset) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object(3 * page);
  const std::string text = "bytes past a page boundary";
  object.Write(page + 8, text.data(), text.size());
  SharedMemoryRegions regions;
  ASSERT_THAT(regions.Register("r", object.key(), page + 8, text.size()), IsOk());
  absl::StatusOr<SharedMemoryRegions::Bytes> view = regions.View("r", 6, 4, "inputs[0]");
  ASSERT_THAT(view.status(), IsOk());
  EXPECT_EQ(view->data, "past");
  EXPECT_FALSE(view->Truncated());
  absl::StatusOr<std::vector<SharedMemoryRegions::RegionStatus>> status = regions.Status("");
  ASSERT_THAT(status.status(), IsOk());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].key, object.key());
  EXPECT_EQ((*status)[0].offset, page + 8);
  EXPECT_EQ((*status)[0].byte_size, text.size());
}

TEST(SharedMemoryRegionsTest, RefusesBadRegistrationsNamingTheField) {
  ShmObject object(4096);
  SharedMemoryRegions regions(SharedMemoryAccess::kUnix, /*max_regions=*/2);
  EXPECT_THAT(regions.Register("", object.key(), 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name has 0 bytes")));
  EXPECT_THAT(regions.Register(std::string(257, 'n'), object.key(), 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("name has 257 bytes; want 1 to 256")));
  EXPECT_THAT(regions.Register("r", "no-slash", 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 'no-slash'")));
  EXPECT_THAT(regions.Register("r", "/a/b", 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key '/a/b'")));
  EXPECT_THAT(regions.Register("r", object.key(), 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("byte_size is 0")));
  EXPECT_THAT(regions.Register("r", object.key(), 4000, 200),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds 4096 bytes; offset 4000 + byte_size 200 = 4200")));
  EXPECT_THAT(regions.Register("r", "/metalserve-test-no-such-object", 0, 16),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such shared-memory object")));
  ASSERT_THAT(regions.Register("r", object.key(), 0, 16), IsOk());
  EXPECT_THAT(regions.Register("r", object.key(), 0, 16),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("'r'")));
  ASSERT_THAT(regions.Register("s", object.key(), 16, 16), IsOk());
  EXPECT_THAT(regions.Register("t", object.key(), 0, 16),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2 shared-memory regions")));
  EXPECT_EQ(regions.size(), 2);
}

// Under local access, the server maps only what every local user could
// read: a caller gets no more through it than it could read itself.
TEST(SharedMemoryRegionsTest, LocalAccessMapsOnlyObjectsEveryLocalUserMayRead) {
  ShmObject private_object(64, 0600);
  ShmObject shared_object(64, 0644);
  SharedMemoryRegions local(SharedMemoryAccess::kLocal);
  EXPECT_THAT(local.Register("p", private_object.key(), 0, 64),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("is not readable by every local user (mode 0600)")));
  EXPECT_THAT(local.Register("s", shared_object.key(), 0, 64), IsOk());
  SharedMemoryRegions unix_only(SharedMemoryAccess::kUnix);
  EXPECT_THAT(unix_only.Register("p", private_object.key(), 0, 64), IsOk());
}

TEST(SharedMemoryRegionsTest, AFifoNamedLikeAnObjectIsRefusedWithoutBlocking) {
  SKIP_UNLESS_LINUX("POSIX shared memory lives in /dev/shm on Linux only");
  const std::string key = absl::StrCat("/ms-test-fifo-", getpid());
  const std::string path = "/dev/shm" + key;
  ASSERT_EQ(mkfifo(path.c_str(), 0644), 0) << std::strerror(errno);
  struct Unlink {
    std::string path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_fifo{path};
  SharedMemoryRegions regions;
  EXPECT_THAT(regions.Register("r", key, 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a shared-memory object")));
}

TEST(SharedMemoryRegionsTest, AViewOutlivesItsRegistrationAndTheRegistry) {
  ShmObject object(64);
  object.Write(0, "held", 4);
  absl::StatusOr<SharedMemoryRegions::Bytes> view;
  {
    SharedMemoryRegions regions;
    ASSERT_THAT(regions.Register("r", object.key(), 0, 64), IsOk());
    view = regions.View("r", 0, 4, "inputs[0]");
    ASSERT_THAT(view.status(), IsOk());
    ASSERT_THAT(regions.Unregister("r"), IsOk());
    EXPECT_THAT(regions.View("r", 0, 4, "inputs[0]"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("inputs[0]['shared_memory_region'] = 'r' is not a registered")));
    EXPECT_THAT(regions.Unregister("r"), IsOk());  // as Triton: not an error
  }
  EXPECT_EQ(view->data, "held");  // still mapped: the view holds it
}

TEST(SharedMemoryRegionsTest, ARangePastTheRegionIsRefused) {
  ShmObject object(64);
  SharedMemoryRegions regions;
  ASSERT_THAT(regions.Register("r", object.key(), 0, 32), IsOk());
  EXPECT_THAT(regions.View("r", 30, 4, "inputs[1] ('x').parameters"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[1] ('x').parameters['shared_memory_offset'] = 30 + "
                                 "['shared_memory_byte_size'] = 4 is past the end of region "
                                 "'r' (32 bytes)")));
}

// The client shrinks its object under a mapped region: the read that would
// fault gets zeros, the view reports it, and the region refuses new views.
TEST(SharedMemoryRegionsTest, AnObjectTruncatedUnderARegionReadsZerosAndIsReported) {
  SKIP_UNLESS_LINUX("macOS fixes an object's size once set");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object(2 * page);
  const std::vector<char> ones(2 * page, 1);
  object.Write(0, ones.data(), ones.size());
  SharedMemoryRegions regions;
  ASSERT_THAT(regions.Register("r", object.key(), 0, 2 * page), IsOk());
  absl::StatusOr<SharedMemoryRegions::Bytes> view = regions.View("r", 0, 2 * page, "inputs[0]");
  ASSERT_THAT(view.status(), IsOk());
  object.Resize(page / 2);
  int64_t sum = 0;
  for (char c : view->data) sum += c;  // faults past the new end, once per page
  EXPECT_EQ(sum, static_cast<int64_t>(page / 2));  // the first half page is still there
  EXPECT_TRUE(view->Truncated());
  EXPECT_THAT(regions.View("r", 0, 4, "inputs[0]"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("was truncated after it was registered; unregister it")));
}

// A SIGBUS that is no region's fault, sent by kill(), still reaches the
// handler installed before the guard.
TEST(SharedMemoryRegionsTest, ASigbusSentByKillReachesTheEarlierHandler) {
  static std::atomic<int> earlier{0};
  struct sigaction mine {}, old {};
  mine.sa_handler = [](int) { earlier.fetch_add(1); };
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGBUS, &mine, &old), 0);
  struct Restore {
    struct sigaction action;
    ~Restore() { sigaction(SIGBUS, &action, nullptr); }
  } restore{old};
  // The guard is installed once per process, at the first registration, and
  // chains to what was there then: only when that is now (ctest runs each
  // test in a process of its own) is `mine` its predecessor.
  ShmObject object(64);
  SharedMemoryRegions regions;
  ASSERT_THAT(regions.Register("r", object.key(), 0, 64), IsOk());
  struct sigaction now {};
  sigaction(SIGBUS, nullptr, &now);
  if ((now.sa_flags & SA_SIGINFO) == 0) GTEST_SKIP() << "an earlier test installed the guard";
  restore.action = now;  // the guard stays for later tests: it is installed only once
  raise(SIGBUS);
  EXPECT_EQ(earlier.load(), 1);
}

// Inputs in shared memory take no raw_input_contents entry: the others'
// entries are theirs in order, read from the request, from gRPC's slices or
// converted from typed contents.
TEST(SharedMemoryDecodeTest, OtherInputsKeepTheirOwnBytesInOrder) {
  ShmObject object(64);
  object.Write(8, "AAAA", 4);
  SharedMemoryRegions regions;
  ASSERT_THAT(regions.Register("r", object.key(), 0, 64), IsOk());
  ModelInferRequest req;
  for (const char* name : {"a", "b", "c"}) {
    auto* t = req.add_inputs();
    t->set_name(name);
    t->set_datatype("UINT8");
    t->add_shape(4);
  }
  auto& params = *req.mutable_inputs(0)->mutable_parameters();
  params["shared_memory_region"].set_string_param("r");
  params["shared_memory_offset"].set_uint64_param(8);
  params["shared_memory_byte_size"].set_int64_param(4);
  req.add_raw_input_contents("BBBB");
  req.add_raw_input_contents("CCCC");

  std::vector<std::string> storage;
  SharedMemoryInputs shm{.regions = &regions};
  absl::StatusOr<std::vector<RawInput>> in = DecodeKServeInputs(req, &storage, nullptr, &shm);
  ASSERT_THAT(in.status(), IsOk());
  ASSERT_EQ(in->size(), 3u);
  EXPECT_EQ((*in)[0].data, "AAAA");
  EXPECT_EQ((*in)[1].data, "BBBB");
  EXPECT_EQ((*in)[2].data, "CCCC");
  EXPECT_EQ(shm.views.size(), 1u);

  // The same with raw_input_contents read from slices (sliced_request.h).
  ModelInferRequest skeleton = req;
  skeleton.clear_raw_input_contents();
  const std::vector<std::vector<absl::string_view>> pieces = {{"BB", "BB"}, {"CCCC"}};
  SharedMemoryInputs shm2{.regions = &regions};
  in = DecodeKServeInputs(skeleton, &storage, &pieces, &shm2);
  ASSERT_THAT(in.status(), IsOk());
  EXPECT_EQ((*in)[0].data, "AAAA");
  EXPECT_THAT((*in)[1].pieces, ElementsAre("BB", "BB"));
  EXPECT_EQ((*in)[2].data, "CCCC");

  // And with typed contents for the others.
  ModelInferRequest typed = skeleton;
  for (int i : {1, 2}) {
    for (int v : {7, 8, 9, i}) typed.mutable_inputs(i)->mutable_contents()->add_uint_contents(v);
  }
  SharedMemoryInputs shm3{.regions = &regions};
  in = DecodeKServeInputs(typed, &storage, nullptr, &shm3);
  ASSERT_THAT(in.status(), IsOk());
  EXPECT_EQ((*in)[0].data, "AAAA");
  EXPECT_EQ((*in)[1].data, std::string("\x07\x08\x09\x01"));
  EXPECT_EQ((*in)[2].data, std::string("\x07\x08\x09\x02"));
}

TEST(SharedMemoryAccessTest, AdmitsPeersByAccess) {
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kOff, "unix:/run/m.sock"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kUnix, "unix:/run/m.sock"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kUnix, "unix:"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kUnix, "ipv4:127.0.0.1:5000"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kUnix, "unix-abstract:ms"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "unix-abstract:ms"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv6:[::1]:5000"));
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv6:[::ffff:127.0.0.1]:5"));
  // gRPC's own spelling of an IPv6 peer: brackets percent-encoded.
  EXPECT_TRUE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv6:%5B::1%5D:5000"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv6:%5B::10%5D:5000"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv4:10.0.0.7:5000"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv4:1270.0.0.1:5000"));
  EXPECT_FALSE(PeerMayUseSharedMemory(SharedMemoryAccess::kLocal, "ipv6:[::10]:5000"));
  EXPECT_THAT(ParseSharedMemoryAccess("system"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'system'")));
}

// The extension over gRPC: a server whose fake runner doubles its input.
class SharedMemoryServerTest : public FakeRunnerServerTest {
 protected:
  void Start(SharedMemoryAccess access, const std::string& extra_address = "") {
    ServerOptions so = testing::LoopbackServerOptions();
    so.shared_memory = access;
    if (!extra_address.empty()) so.address += "," + extra_address;
    const absl::Status started = StartFakeServer(so);
    ASSERT_TRUE(started.ok()) << started;
    stub_ = Stub(ServerTarget());
  }
  static std::unique_ptr<inference::GRPCInferenceService::Stub> Stub(const std::string& target) {
    return inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return ctx;
  }
  grpc::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t bytes, inference::GRPCInferenceService::Stub* stub = nullptr) {
    inference::SystemSharedMemoryRegisterRequest q;
    q.set_name(name);
    q.set_key(key);
    q.set_offset(offset);
    q.set_byte_size(bytes);
    inference::SystemSharedMemoryRegisterResponse r;
    return (stub != nullptr ? stub : stub_.get())->SystemSharedMemoryRegister(Ctx().get(), q, &r);
  }
  // A request for `rows` rows whose bytes are `bytes` at `offset` of region
  // `region`.
  static ModelInferRequest ShmRequest(int64_t rows, const std::string& region, int64_t offset,
                                      int64_t bytes) {
    ModelInferRequest req;
    req.set_model_name("fake");
    auto* t = req.add_inputs();
    t->set_name("input");
    t->set_datatype("FP32");
    t->add_shape(rows);
    t->add_shape(kW);
    (*t->mutable_parameters())["shared_memory_region"].set_string_param(region);
    (*t->mutable_parameters())["shared_memory_offset"].set_int64_param(offset);
    (*t->mutable_parameters())["shared_memory_byte_size"].set_uint64_param(bytes);
    return req;
  }
  grpc::Status Infer(const ModelInferRequest& req, ModelInferResponse* resp) {
    return stub_->ModelInfer(Ctx().get(), req, resp);
  }
  // One ordinary request still answers (the server kept serving).
  void ExpectServing() {
    ModelInferRequest req = ShmRequest(1, "", 0, 0);
    req.mutable_inputs(0)->clear_parameters();
    const std::vector<float> v = Values(1, 5);
    req.add_raw_input_contents(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    ModelInferResponse resp;
    const grpc::Status s = Infer(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(Floats(resp.raw_output_contents(0))[0], 10.0f);
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(SharedMemoryServerTest, ServesInputsReadFromARegisteredRegion) {
  Start(SharedMemoryAccess::kLocal);
  const std::vector<float> v = Values(2, 1);
  ShmObject object(4096);
  object.Write(64, v.data(), v.size() * 4);
  ASSERT_TRUE(Register("in", object.key(), 0, 4096).ok());
  EXPECT_EQ(testing::Sample(metrics_->Scrape(), "metalserve_shared_memory_regions"), 1);
  EXPECT_EQ(testing::Sample(metrics_->Scrape(), "metalserve_shared_memory_region_bytes"), 4096);
  ModelInferResponse resp;
  const grpc::Status s = Infer(ShmRequest(2, "in", 64, v.size() * 4), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<float> doubled(v.size());
  for (size_t i = 0; i < v.size(); ++i) doubled[i] = 2 * v[i];
  EXPECT_EQ(Floats(resp.raw_output_contents(0)), doubled);

  inference::SystemSharedMemoryStatusRequest q;
  inference::SystemSharedMemoryStatusResponse status;
  ASSERT_TRUE(stub_->SystemSharedMemoryStatus(Ctx().get(), q, &status).ok());
  ASSERT_EQ(status.regions().count("in"), 1u);
  EXPECT_EQ(status.regions().at("in").key(), object.key());
  EXPECT_EQ(status.regions().at("in").byte_size(), 4096u);
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(stub_->ServerMetadata(Ctx().get(), {}, &metadata).ok());
  EXPECT_THAT(metadata.extensions(), ::testing::Contains("system_shared_memory"));

  inference::SystemSharedMemoryUnregisterRequest u;  // empty name: all
  inference::SystemSharedMemoryUnregisterResponse ur;
  ASSERT_TRUE(stub_->SystemSharedMemoryUnregister(Ctx().get(), u, &ur).ok());
  EXPECT_EQ(testing::Sample(metrics_->Scrape(), "metalserve_shared_memory_regions"), 0);
  const grpc::Status after = Infer(ShmRequest(2, "in", 64, v.size() * 4), &resp);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(after.error_message(), HasSubstr("'in' is not a registered region"));
}

TEST_F(SharedMemoryServerTest, BadSharedMemoryInputsGetInvalidArgumentNamingTheParameter) {
  Start(SharedMemoryAccess::kLocal);
  ShmObject object(4096);
  ASSERT_TRUE(Register("in", object.key(), 0, 1024).ok());
  const int64_t row = kW * 4;
  auto expect = [&](const ModelInferRequest& req, const std::string& text) {
    ModelInferResponse resp;
    const grpc::Status s = Infer(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << text;
    EXPECT_THAT(s.error_message(), HasSubstr(text));
  };
  expect(ShmRequest(1, "nope", 0, row),
         "inputs[0] ('input').parameters['shared_memory_region'] = 'nope' is not a registered");
  expect(ShmRequest(1, "in", 1024 - row + 4, row),
         "['shared_memory_offset'] = " + std::to_string(1024 - row + 4));
  ModelInferRequest no_size = ShmRequest(1, "in", 0, row);
  no_size.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_byte_size");
  expect(no_size, "['shared_memory_region'] is set without ['shared_memory_byte_size']");
  ModelInferRequest no_region = ShmRequest(1, "in", 0, row);
  no_region.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_region");
  expect(no_region, "['shared_memory_byte_size'] is set without ['shared_memory_region']");
  ModelInferRequest negative = ShmRequest(1, "in", 0, row);
  (*negative.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"].set_int64_param(-4);
  expect(negative, "['shared_memory_offset'] = -4 must be a non-negative int64_param");
  ModelInferRequest with_raw = ShmRequest(1, "in", 0, row);
  with_raw.add_raw_input_contents(std::string(row, '\0'));
  expect(with_raw, "raw_input_contents has 1 entries but inputs has 1, 1 of them in shared memory");
  ModelInferRequest typed = ShmRequest(1, "in", 0, row);
  typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  expect(typed, "contents.fp32_contents is set together with a shared-memory region");
  expect(ShmRequest(2, "in", 0, row), "('input').data has 16 bytes; shape [2,4] of float32 needs 32");
  ModelInferRequest out = ShmRequest(1, "in", 0, row);
  auto* o = out.add_outputs();
  o->set_name("output");
  (*o->mutable_parameters())["shared_memory_region"].set_string_param("in");
  expect(out, "shared-memory outputs are not supported");
  ExpectServing();
}

TEST_F(SharedMemoryServerTest, ARegionTruncatedByItsClientFailsTheRequestAndTheServerServesOn) {
  Start(SharedMemoryAccess::kLocal);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const int64_t rows = static_cast<int64_t>(2 * page / (kW * 4));
  ShmObject object(rows * kW * 4);
  ASSERT_TRUE(Register("in", object.key(), 0, rows * kW * 4).ok());
  object.Resize(0);
  ModelInferResponse resp;
  const grpc::Status s = Infer(ShmRequest(rows, "in", 0, rows * kW * 4), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("'in' was truncated by its owner"));
  EXPECT_EQ(testing::Sample(metrics_->Scrape(), "metalserve_shared_memory_truncations_total"), 1);
  const grpc::Status again = Infer(ShmRequest(rows, "in", 0, rows * kW * 4), &resp);
  EXPECT_THAT(again.error_message(), HasSubstr("unregister it and register it again"));
  ExpectServing();
}

// A request of more rows than a batch holds is split across batches, each
// reading its rows from the region; the region stays mapped until the last.
TEST_F(SharedMemoryServerTest, ARequestSplitAcrossBatchesReadsEveryRowFromTheRegion) {
  Start(SharedMemoryAccess::kLocal);
  const int64_t rows = 20;  // the loopback server batches at most 8
  const std::vector<float> v = Values(rows, -3);
  ShmObject object(v.size() * 4);
  object.Write(0, v.data(), v.size() * 4);
  ASSERT_TRUE(Register("in", object.key(), 0, v.size() * 4).ok());
  ModelInferResponse resp;
  const grpc::Status s = Infer(ShmRequest(rows, "in", 0, v.size() * 4), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::vector<float> out = Floats(resp.raw_output_contents(0));
  ASSERT_EQ(out.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(out[i], 2 * v[i]) << i;
}

// Local access admits IPv6 loopback, whose peer gRPC spells ipv6:%5B::1%5D:port.
TEST_F(SharedMemoryServerTest, LocalAccessAdmitsIpv6Loopback) {
  ServerOptions so = testing::LoopbackServerOptions();
  so.address = "[::1]:0";
  so.shared_memory = SharedMemoryAccess::kLocal;
  {
    const int probe = socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_loopback;
    const bool v6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  }
  const absl::Status started = StartFakeServer(so);
  ASSERT_TRUE(started.ok()) << started;
  stub_ = Stub(absl::StrCat("[::1]:", server_->port()));
  ShmObject object(4096);
  const grpc::Status s = Register("in", object.key(), 0, 4096);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(SharedMemoryServerTest, AServerWithSharedMemoryOffRefusesItNamingTheFlag) {
  Start(SharedMemoryAccess::kOff);
  ShmObject object(4096);
  const grpc::Status s = Register("in", object.key(), 0, 4096);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("--shared_memory=off"));
  ModelInferResponse resp;
  const grpc::Status infer = Infer(ShmRequest(1, "in", 0, kW * 4), &resp);
  EXPECT_EQ(infer.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(infer.error_message(),
              HasSubstr("inputs[0] ('input').parameters['shared_memory_region']: this server "
                        "does not accept shared memory"));
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(stub_->ServerMetadata(Ctx().get(), {}, &metadata).ok());
  EXPECT_THAT(metadata.extensions(), ::testing::Not(::testing::Contains("system_shared_memory")));
}

TEST(SharedMemoryOptionsTest, UnixAccessIsRefusedBesideAnAbstractSocket) {
  ServerOptions so = testing::LoopbackServerOptions();
  so.shared_memory = SharedMemoryAccess::kUnix;
  for (const char* address : {"127.0.0.1:0,unix-abstract:ms", "127.0.0.1:0, unix-abstract:ms"}) {
    so.address = address;
    EXPECT_THAT(so.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("'unix-abstract:ms' is an abstract socket")))
        << address;
  }
  so.shared_memory = SharedMemoryAccess::kLocal;
  EXPECT_THAT(so.Validate(), IsOk());
}

TEST_F(SharedMemoryServerTest, UnixAccessAdmitsTheSocketAndRefusesLoopbackTcp) {
  testing::TempDir dir("metalserve-shm-");
  const std::string socket = "unix://" + dir.path() + "/m.sock";
  Start(SharedMemoryAccess::kUnix, socket);
  ShmObject object(4096);
  const grpc::Status tcp = Register("in", object.key(), 0, 4096);
  EXPECT_EQ(tcp.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(tcp.error_message(), HasSubstr("this call came from ipv4:127.0.0.1:"));
  auto local = Stub(socket);
  const grpc::Status unix_call = Register("in", object.key(), 0, 4096, local.get());
  ASSERT_TRUE(unix_call.ok()) << unix_call.error_message();
  const std::vector<float> v = Values(1, 3);
  object.Write(0, v.data(), v.size() * 4);
  ModelInferResponse resp;
  const grpc::Status s =
      local->ModelInfer(Ctx().get(), ShmRequest(1, "in", 0, v.size() * 4), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Floats(resp.raw_output_contents(0))[0], 6.0f);
  const grpc::Status over_tcp = Infer(ShmRequest(1, "in", 0, v.size() * 4), &resp);
  EXPECT_EQ(over_tcp.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace metalserve
