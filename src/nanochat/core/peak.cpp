#include "nanochat/core/peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "nanochat/core/timer.h"

namespace nanochat {

namespace {

// Runs `iters` rounds of 16 independent FMA chains; returns a value so the work is kept.
float fma_chains(long iters) {
#if defined(__AVX512F__)
  // 16 named accumulators (an array would live on the stack and measure the load/store ports).
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define NC_DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + 0.01f * i);
#define NC_STEP(i)                    \
  a##i = _mm512_fmadd_ps(a##i, m, c); \
  __asm__ volatile("" : "+v"(a##i));
#define NC_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
  NC_ALL(NC_DECL)
  for (long it = 0; it < iters; ++it) {
    NC_ALL(NC_STEP)
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                     _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
#undef NC_DECL
#undef NC_STEP
#undef NC_ALL
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define NC_DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + 0.01f * i);
#define NC_STEP(i)                    \
  a##i = _mm256_fmadd_ps(a##i, m, c); \
  __asm__ volatile("" : "+x"(a##i));
#define NC_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
  NC_ALL(NC_DECL)  // 12 accumulators: AVX2 has 16 ymm registers and needs 2 for m, c
  for (long it = 0; it < iters; ++it) {
    NC_ALL(NC_STEP)
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
#undef NC_DECL
#undef NC_STEP
#undef NC_ALL
  float out[8];
  _mm256_storeu_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
#else
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = 1.0f + 0.01f * static_cast<float>(i);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) {
      a[i] = a[i] * 0.999999f + 1e-7f;
      __asm__ volatile("" : "+x"(a[i]));
    }
  float r = 0;
  for (float v : a) r += v;
  return r;
#endif
}

// FMAs per iteration of fma_chains: vector lanes x independent chains.
constexpr double kFmasPerIter =
#if defined(__AVX512F__)
    16 * 16;
#elif defined(__AVX2__) && defined(__FMA__)
    8 * 12;
#else
    1 * 16;
#endif

#if !defined(NANOCHAT_ISA_AVX2)
// Runs `iters` rounds of 16 independent vdpbf16ps chains (each: acc += a.b over bf16 pairs).
// Compiled for AVX512_BF16 whatever the build targets, and run only where the CPU has it; the AVX2
// build (NANOCHAT_ISA=avx2) holds no AVX-512 instruction at all and has no bf16 path.
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(long iters) {
  const __m512bh m = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);  // pairs of bf16 0.996
  const __m512bh c = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // pairs of bf16 ~1e-7
#define NC_DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + 0.01f * i);
#define NC_STEP(i)                     \
  a##i = _mm512_dpbf16_ps(a##i, m, c); \
  __asm__ volatile("" : "+v"(a##i));
#define NC_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
  NC_ALL(NC_DECL)
  for (long it = 0; it < iters; ++it) {
    NC_ALL(NC_STEP)
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                     _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
#undef NC_DECL
#undef NC_STEP
#undef NC_ALL
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
}
#else
float bf16_dot_chains(long) { return 0.f; }
#endif

// Multiply-adds per iteration of bf16_dot_chains: 16 chains x 16 lanes x 2 bf16 pairs.
constexpr double kBf16DotsPerIter = 16 * 16 * 2;

float run_chains(PeakKind kind, long iters) {
  return kind == PeakKind::Bf16Dot ? bf16_dot_chains(iters) : fma_chains(iters);
}

}  // namespace

bool bf16_dot_supported() {
#if defined(NANOCHAT_ISA_AVX2)
  return false;
#else
  static const bool ok = __builtin_cpu_supports("avx512bf16");
  return ok;
#endif
}

const char* fma_peak_isa(PeakKind kind) {
  if (kind == PeakKind::Bf16Dot) return "avx512_bf16";
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return "scalar";
#endif
}

double measure_fma_peak_gflops(int threads, double seconds, PeakKind kind) {
  if (threads < 1) threads = 1;
  if (kind == PeakKind::Bf16Dot && !bf16_dot_supported()) return 0;
  const double per_iter = kind == PeakKind::Bf16Dot ? kBf16DotsPerIter : kFmasPerIter;
  // Calibrate the iteration count on one thread, then run all threads together several times
  // and keep the best (the machine may be shared).
  long iters = 1 << 16;
  for (;;) {
    Timer t;
    volatile float sink = run_chains(kind, iters);
    (void)sink;
    if (t.seconds() > 0.02 || iters > (1L << 34)) break;
    iters *= 2;
  }
  double best = 0;
  Timer total;
  do {
    std::vector<double> secs(threads, 0.0);
#pragma omp parallel num_threads(threads)
    {
      Timer t;
      volatile float sink = run_chains(kind, iters);
      (void)sink;
      secs[omp_get_thread_num()] = t.seconds();
    }
    const double slowest = *std::max_element(secs.begin(), secs.end());
    const double flops = 2.0 * per_iter * static_cast<double>(iters) * threads;
    best = std::max(best, flops / slowest / 1e9);
  } while (total.seconds() < seconds);
  return best;
}

double best_known_fma_peak_gflops(double measured, int threads, const std::string& cache_path, PeakKind kind) {
  const std::string key = std::string(fma_peak_isa(kind)) + "/" + std::to_string(threads);
  nlohmann::json cache = nlohmann::json::object();
  {
    std::ifstream in(cache_path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      try {
        cache = nlohmann::json::parse(ss.str());
        if (!cache.is_object()) cache = nlohmann::json::object();
      } catch (const nlohmann::json::exception&) {
        cache = nlohmann::json::object();  // unreadable: start over
      }
    }
  }
  double best = measured;
  if (cache.contains(key) && cache[key].is_number()) best = std::max(best, cache[key].get<double>());
  if (best > measured || (cache.contains(key) && cache[key] == measured)) return best;
  cache[key] = measured;
  std::error_code ec;
  const std::filesystem::path path(cache_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const std::string tmp = cache_path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return best;
    out << cache.dump(2) << "\n";
    if (!out) return best;
  }
  std::filesystem::rename(tmp, cache_path, ec);  // atomic replace; ranks racing both write a max
  if (ec) std::filesystem::remove(tmp, ec);
  return best;
}

int physical_cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  std::set<std::pair<int, int>> cores;  // (package id, core id)
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream pk(dir + "physical_package_id"), co(dir + "core_id");
    int p = -1, c = -1;
    if (!(pk >> p) || !(co >> c)) return 0;
    cores.insert({p, c});
  }
  return static_cast<int>(cores.size());
}

double mfu_reference_peak_gflops(double best_n, double best_1, int threads, int cores) {
  const int n = cores > 0 ? std::min(threads, cores) : threads;
  return std::max(best_n, static_cast<double>(std::max(n, 1)) * best_1);
}

MfuPeak measure_mfu_peak(int threads, const std::string& cache_path, PeakKind kind) {
  MfuPeak p;
  p.measured = measure_fma_peak_gflops(threads, 0.2, kind);
  p.reference = best_known_fma_peak_gflops(p.measured, threads, cache_path, kind);
  if (threads > 1)  // one core alone is seldom disturbed: the n-thread peak is at least n x it
    p.reference = mfu_reference_peak_gflops(
        p.reference, best_known_fma_peak_gflops(measure_fma_peak_gflops(1, 0.1, kind), 1, cache_path, kind), threads,
        physical_cores_available());
  return p;
}

}  // namespace nanochat
