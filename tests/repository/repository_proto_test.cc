// The KServe model-repository extension in proto/inference/grpc_service.proto
// must match Triton's grpc_service.proto (triton-inference-common,
// protobuf/grpc_service.proto) name for name and number for number, or
// tritonclient's load_model / unload_model / get_model_repository_index
// would send fields this server reads as something else.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"

namespace metalserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Each field as Triton declares it: name, number, type, repeated.
struct Field {
  std::string name;
  int number;
  FieldDescriptor::Type type;
  bool repeated = false;
};

void ExpectFields(const Descriptor* message, const std::vector<Field>& fields) {
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(message->field_count(), static_cast<int>(fields.size())) << message->full_name();
  for (const Field& want : fields) {
    const FieldDescriptor* got = message->FindFieldByName(want.name);
    ASSERT_NE(got, nullptr) << message->full_name() << "." << want.name;
    EXPECT_EQ(got->number(), want.number) << got->full_name();
    EXPECT_EQ(got->type(), want.type) << got->full_name();
    EXPECT_EQ(got->is_repeated(), want.repeated) << got->full_name();
  }
}

TEST(RepositoryProtoTest, ServiceHasTritonsRepositoryMethods) {
  const auto* service = inference::ModelReadyRequest::descriptor()->file()->FindServiceByName(
      "GRPCInferenceService");
  ASSERT_NE(service, nullptr);
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"RepositoryIndex", "inference.RepositoryIndexRequest"},
      {"RepositoryModelLoad", "inference.RepositoryModelLoadRequest"},
      {"RepositoryModelUnload", "inference.RepositoryModelUnloadRequest"}};
  for (const auto& [name, input] : methods) {
    const auto* method = service->FindMethodByName(name);
    ASSERT_NE(method, nullptr) << name;
    EXPECT_EQ(method->input_type()->full_name(), input);
    EXPECT_FALSE(method->client_streaming() || method->server_streaming()) << name;
  }
}

TEST(RepositoryProtoTest, MessagesHaveTritonsFieldNumbers) {
  using T = FieldDescriptor;
  ExpectFields(inference::RepositoryIndexRequest::descriptor(),
               {{"repository_name", 1, T::TYPE_STRING}, {"ready", 2, T::TYPE_BOOL}});
  ExpectFields(inference::RepositoryIndexResponse::descriptor(),
               {{"models", 1, T::TYPE_MESSAGE, true}});
  ExpectFields(inference::RepositoryIndexResponse::ModelIndex::descriptor(),
               {{"name", 1, T::TYPE_STRING}, {"version", 2, T::TYPE_STRING},
                {"state", 3, T::TYPE_STRING}, {"reason", 4, T::TYPE_STRING}});
  for (const Descriptor* request : {inference::RepositoryModelLoadRequest::descriptor(),
                                    inference::RepositoryModelUnloadRequest::descriptor()}) {
    ExpectFields(request, {{"repository_name", 1, T::TYPE_STRING},
                           {"model_name", 2, T::TYPE_STRING},
                           {"parameters", 3, T::TYPE_MESSAGE, true}});
    EXPECT_TRUE(request->FindFieldByName("parameters")->is_map());
  }
  ExpectFields(inference::RepositoryModelLoadResponse::descriptor(), {});
  ExpectFields(inference::RepositoryModelUnloadResponse::descriptor(), {});
  ExpectFields(inference::ModelRepositoryParameter::descriptor(),
               {{"bool_param", 1, T::TYPE_BOOL}, {"int64_param", 2, T::TYPE_INT64},
                {"string_param", 3, T::TYPE_STRING}, {"bytes_param", 4, T::TYPE_BYTES}});
}

}  // namespace
}  // namespace metalserve
