// Raw forward through the runtime (Runner::Run: copy in, forward, copy out)
// per model, optimization level and batch size. The label shows the level
// that verification left active, so a figure is never read for a graph that
// was rejected (e.g. mobilenet_v3_small "full" falls back on LibTorch 1.13).
//
//   build/bench/runtime/runtime_bench [--device=cpu] [--threads=2]
//       [--models=resnet18,mobilenet_v2,mobilenet_v3_small] [--batches=1,8]
//       (a model named X.pt2 is the AOTInductor package build/models/X.pt2)
//       [--levels=none,freeze,full] [--precision=fp32] [--channels_last=1]
//       [--gap_us=0] [benchmark flags, e.g. --benchmark_min_time=2]
//
// --gap_us=N (N > 0) leaves the runner idle for N microseconds before each
// timed Run, as a served call at concurrency 1 finds it (the client's round
// trip between forwards), where the default loop runs forwards back to back
// (a device that never idles, launches queued behind the previous forward);
// only the Run is timed (manual time; the name ends in /manual_time).
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "server/model_config/model_config.h"
#include "server/runtime/torch_runner.h"

namespace metalserve {
namespace {

struct Config {
  std::string device = "cpu";
  int threads = 2;
  std::vector<std::string> models = {"resnet18", "mobilenet_v2", "mobilenet_v3_small"};
  std::vector<int64_t> batches = {1, 8};
  std::string precision = "fp32";
  bool channels_last = false;
  std::vector<std::string> levels = {"none", "freeze", "full"};
  int64_t gap_us = 0;
};

Config& config() {
  static Config c;
  return c;
}

// One runner per (model, level), created on first use and kept.
Runner* GetRunner(const std::string& model, const std::string& level) {
  static auto* runners = new std::map<std::pair<std::string, std::string>,
                                      std::unique_ptr<Runner>>();
  auto& slot = (*runners)[{model, level}];
  if (slot == nullptr) {
    RuntimeOptions o;
    // A name ending in .pt2 is an AOTInductor package file in the same folder.
    o.model_path = absl::StrCat(METALSERVE_MODELS_DIR, "/", model,
                                absl::EndsWith(model, ".pt2") ? "" : ".pt");
    o.signature_codec = ModelConfigSignatureCodec();
    o.device = config().device;
    o.threads = config().threads;
    o.optimize = level;
    o.precision = config().precision;
    o.channels_last = config().channels_last;
    o.warmup_batch_sizes = config().batches;
    auto r = CreateTorchRunner(o);
    if (!r.ok()) return nullptr;
    slot = std::move(r).value();
  }
  return slot.get();
}

void BM_Forward(benchmark::State& state, std::string model, std::string level) {
  Runner* runner = GetRunner(model, level);
  if (runner == nullptr) {
    state.SkipWithError("runner creation failed");
    return;
  }
  const int64_t batch = state.range(0);
  std::vector<Tensor> inputs;
  for (const TensorSpec& spec : runner->info().inputs) {
    Tensor t;
    t.name = spec.name;
    t.dtype = spec.dtype;
    t.shape = spec.shape;
    t.shape[0] = batch;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (spec.dtype == DType::kFloat32) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
      t.data.assign(reinterpret_cast<const char*>(v.data()), n * sizeof(float));
    } else {
      // Other dtypes (uint8 pixels, fp16): small integers are valid in all.
      t.data.assign(static_cast<size_t>(n * ItemSize(spec.dtype)), '\0');
      if (spec.dtype == DType::kUInt8) {
        for (int64_t i = 0; i < n; ++i) t.data[i] = static_cast<char>((i * 7919) % 251);
      }
    }
    inputs.push_back(std::move(t));
  }
  const int64_t gap_us = config().gap_us;
  for (auto _ : state) {
    if (gap_us > 0) absl::SleepFor(absl::Microseconds(gap_us));
    const absl::Time start = absl::Now();
    auto out = runner->Run(inputs);
    if (gap_us > 0) state.SetIterationTime(absl::ToDoubleSeconds(absl::Now() - start));
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(absl::StrCat("active=", runner->info().optimization,
                              " device=", runner->info().device));
}

bool ParseFlag(const char* arg, absl::string_view name, std::string* value) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  *value = std::string(arg + prefix.size());
  return true;
}

}  // namespace
}  // namespace metalserve

int main(int argc, char** argv) {
  using metalserve::config;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (metalserve::ParseFlag(argv[i], "device", &v)) {
      config().device = v;
    } else if (metalserve::ParseFlag(argv[i], "threads", &v)) {
      (void)absl::SimpleAtoi(v, &config().threads);
    } else if (metalserve::ParseFlag(argv[i], "models", &v)) {
      config().models = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (metalserve::ParseFlag(argv[i], "precision", &v)) {
      config().precision = v;
    } else if (metalserve::ParseFlag(argv[i], "channels_last", &v)) {
      config().channels_last = v == "1" || v == "true";
    } else if (metalserve::ParseFlag(argv[i], "gap_us", &v)) {
      (void)absl::SimpleAtoi(v, &config().gap_us);
    } else if (metalserve::ParseFlag(argv[i], "levels", &v)) {
      config().levels = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (metalserve::ParseFlag(argv[i], "batches", &v)) {
      config().batches.clear();
      for (absl::string_view b : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        int64_t n = 0;
        if (absl::SimpleAtoi(b, &n) && n > 0) config().batches.push_back(n);
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  for (const std::string& model : config().models) {
    for (const std::string& level : config().levels) {
      auto* b = benchmark::RegisterBenchmark(
          absl::StrCat("Forward/", model, "/", level).c_str(),
          [model, level](benchmark::State& s) { metalserve::BM_Forward(s, model, level); });
      for (int64_t batch : config().batches) b->Arg(batch);
      b->Unit(benchmark::kMillisecond);
      if (config().gap_us > 0) {
        b->UseManualTime();
      } else {
        b->UseRealTime();
      }
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
