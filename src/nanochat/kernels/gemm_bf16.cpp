#include "nanochat/kernels/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.h>

#include "nanochat/core/error.h"
#include "nanochat/kernels/gemm.h"
#include "nanochat/kernels/gemm_internal.h"

// GCC 12's AVX-512 headers build some intrinsics from _mm256_undefined_si256(), which trips
// -W(maybe-)uninitialized false positives once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace nanochat {

namespace {

struct CpuBf16 {
  bool avx512_os = false;  // AVX-512F present and its registers saved by the OS (XCR0)
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

CpuBf16 read_cpuid() {
  CpuBf16 c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
  const bool osxsave = (cx >> 27) & 1u;
  unsigned xcr0 = 0;
  if (osxsave) {
    unsigned hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
  }
  if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return c;
  const bool avx512f = (b >> 16) & 1u;
  c.avx512_os = avx512f && (xcr0 & 0xE6u) == 0xE6u;  // SSE, AVX, opmask, ZMM0-15 upper, ZMM16-31
  c.amx_bf16 = (d >> 22) & 1u;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) c.avx512_bf16 = (a1 >> 5) & 1u;
  return c;
}

const CpuBf16& cpu_bf16() {
  static const CpuBf16 c = read_cpuid();
  return c;
}

bool onednn_has_bf16() {
  detail::gemm_enter(0);  // the build's ISA cap first
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto need = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & need) == need;
}

void check(dnnl_status_t st, const char* what, int64_t M, int64_t N, int64_t K) {
  if (st != dnnl_success)
    fail("internal: oneDNN ", what, " failed with status ", static_cast<int>(st), " for the bf16 product M=", M,
         " N=", N, " K=", K);
}

// One cached matmul primitive with its three memory objects (their buffers are set per call).
struct Entry {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  std::string impl;
  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
    if (a) dnnl_memory_destroy(a);
    if (b) dnnl_memory_destroy(b);
    if (c) dnnl_memory_destroy(c);
    if (prim) dnnl_primitive_destroy(prim);
  }
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float>;
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::get<0>(k) * 2 + std::get<1>(k);
    auto mix = [&h](int64_t v) { h = h * 1000003u ^ static_cast<size_t>(v); };
    mix(std::get<2>(k));
    mix(std::get<3>(k));
    mix(std::get<4>(k));
    mix(std::get<5>(k));
    mix(std::get<6>(k));
    mix(std::get<7>(k));
    mix(static_cast<int64_t>(std::get<8>(k) * 4096.f));
    return h;
  }
};

// The calling thread's engine, stream and primitives (oneDNN objects are used by one thread here).
struct Context {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
  Context() {
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine creation", 0, 0, 0);
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream creation", 0, 0, 0);
  }
  ~Context() {
    cache.clear();
    if (stream) dnnl_stream_destroy(stream);
    if (engine) dnnl_engine_destroy(engine);
  }
};

Context& context() {
  thread_local Context ctx;
  return ctx;
}

Entry& primitive_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                     float beta) {
  Context& ctx = context();
  const Key key{ta, tb, M, N, K, lda, ldb, ldc, beta};
  auto it = ctx.cache.find(key);
  if (it != ctx.cache.end()) return *it->second;
  dnnl_memory_desc_t a_md, b_md, c_md;
  const dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
  const dnnl_dims_t a_str = {ta ? 1 : lda, ta ? lda : 1};
  const dnnl_dims_t b_str = {tb ? 1 : ldb, tb ? ldb : 1};
  const dnnl_dims_t c_str = {ldc, 1};
  check(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_str), "A descriptor", M, N, K);
  check(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_str), "B descriptor", M, N, K);
  check(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str), "C descriptor", M, N, K);
  dnnl_matmul_desc_t op;
  check(dnnl_matmul_desc_init(&op, &a_md, &b_md, nullptr, &c_md), "matmul descriptor", M, N, K);
  dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_attr_create(&attr), "attribute creation", M, N, K);
  if (beta != 0.f) {
    dnnl_post_ops_t po = nullptr;
    check(dnnl_post_ops_create(&po), "post-op creation", M, N, K);
    check(dnnl_post_ops_append_sum(po, beta), "sum post-op", M, N, K);
    check(dnnl_primitive_attr_set_post_ops(attr, po), "post-op attribute", M, N, K);
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &op, attr, ctx.engine, nullptr);
  dnnl_primitive_attr_destroy(attr);
  check(st, "bf16 matmul primitive descriptor", M, N, K);
  auto e = std::make_unique<Entry>();
  const char* impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) e->impl = impl;
  const dnnl_status_t st2 = dnnl_primitive_create(&e->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  check(st2, "bf16 matmul primitive", M, N, K);
  check(dnnl_memory_create(&e->a, &a_md, ctx.engine, DNNL_MEMORY_NONE), "A memory", M, N, K);
  check(dnnl_memory_create(&e->b, &b_md, ctx.engine, DNNL_MEMORY_NONE), "B memory", M, N, K);
  check(dnnl_memory_create(&e->c, &c_md, ctx.engine, DNNL_MEMORY_NONE), "C memory", M, N, K);
  return *ctx.cache.emplace(key, std::move(e)).first->second;
}

void check_args(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) fail("internal: bgemm with negative sizes M=", M, " N=", N, " K=", K);
  const int64_t a_cols = ta ? M : K, b_cols = tb ? K : N;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) || ldc < std::max<int64_t>(1, N))
    fail("internal: bgemm leading dimensions too small: lda=", lda, " ldb=", ldb, " ldc=", ldc, " for M=", M, " N=", N,
         " K=", K);
}

}  // namespace

bool native_bf16_available() {
  static const bool ok = [] {
    const CpuBf16& c = cpu_bf16();
    return c.avx512_os && (c.avx512_bf16 || c.amx_bf16) && onednn_has_bf16();
  }();
  return ok;
}

std::string native_bf16_status() {
  const CpuBf16& c = cpu_bf16();
  return str_cat("cpuid: avx512 ", c.avx512_os ? "yes" : "no", ", avx512_bf16 ", c.avx512_bf16 ? "yes" : "no",
                 ", amx_bf16 ", c.amx_bf16 ? "yes" : "no", "; oneDNN ISA ", gemm_isa(),
                 onednn_has_bf16() ? " (bf16 kernels)" : " (no bf16 kernels)");
}

void require_native_bf16(const std::string& flag) {
  if (native_bf16_available()) return;
  const CpuBf16& c = cpu_bf16();
  const bool cpu_ok = c.avx512_os && (c.avx512_bf16 || c.amx_bf16);
  fail(flag,
       " needs a CPU with native bfloat16 instructions (AVX512_BF16 or AMX-BF16) and a build whose oneDNN may use "
       "them; here: ",
       native_bf16_status(), ". ",
       cpu_ok ? "This build or ONEDNN_MAX_CPU_ISA caps oneDNN below avx512_core_bf16: use the native build "
                "(-DNANOCHAT_ISA=native) without that variable, or "
              : "",
       "run in fp32 (the default, --dtype float32)");
}

void to_bf16(const float* src, bf16* dst, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 17))
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    int64_t i = blk * kBlock;
    const int64_t end = std::min(n, i + kBlock);
#if defined(__AVX512F__)
    // the scalar rule in 16 lanes: u + 0x7fff + ((u >> 16) & 1), NaN -> quiet NaN, then the high halves
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    for (; i + 16 <= end; i += 16) {
      const __m512i u = _mm512_loadu_si512(src + i);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
      __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
      r = _mm512_srli_epi32(r, 16);
      r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
    }
#endif
    for (; i < end; ++i) dst[i] = float_to_bf16(src[i]);
  }
}

void to_bf16_rows(const float* src, int64_t ld_src, bf16* dst, int64_t rows, int64_t cols) {
  if (ld_src == cols) {
    to_bf16(src, dst, rows * cols);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 17))
  for (int64_t r = 0; r < rows; ++r) to_bf16(src + r * ld_src, dst + r * cols, cols);
}

void bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // oneDNN rejects empty reductions: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  if (!native_bf16_available()) require_native_bf16("a bfloat16 matrix product");
  detail::gemm_enter(2 * M * N * K);
  Entry& e = primitive_for(trans_a, trans_b, M, N, K, lda, ldb, ldc, beta);
  check(dnnl_memory_set_data_handle(e.a, const_cast<bf16*>(A)), "A handle", M, N, K);
  check(dnnl_memory_set_data_handle(e.b, const_cast<bf16*>(B)), "B handle", M, N, K);
  check(dnnl_memory_set_data_handle(e.c, C), "C handle", M, N, K);
  const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  Context& ctx = context();
  check(dnnl_primitive_execute(e.prim, ctx.stream, 3, args), "bf16 matmul", M, N, K);
  check(dnnl_stream_wait(ctx.stream), "stream wait", M, N, K);
}

std::string bgemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  if (!native_bf16_available()) return "none (no native bf16)";
  const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  return primitive_for(trans_a, trans_b, M, N, K, lda, ldb, N, 0.f).impl;
}

}  // namespace nanochat
