#include "nanochat/launch/selftest.h"

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <vector>

#include "nanochat/cluster/agree.h"
#include "nanochat/core/error.h"
#include "nanochat/core/format.h"
#ifdef NANOCHAT_HAVE_GLOO
#include "nanochat/cluster/gloo_communicator.h"
#include "nanochat/cluster/store.h"
#endif

namespace nanochat::cluster {

namespace {

template <typename T>
void expect_equal(const char* what, size_t i, T got, T want, int rank) {
  if (got != want) fail("dist-selftest: rank ", rank, ": ", what, " element ", i, " is ", got, ", expected ", want);
}

std::vector<size_t> offsets_of(const std::vector<size_t>& c) {
  std::vector<size_t> o(c.size() + 1, 0);
  for (size_t i = 0; i < c.size(); ++i) o[i + 1] = o[i] + c[i];
  return o;
}

// What every check of one self-test iteration needs.
struct Round {
  int W, r, iter;
  double T;     // sum over ranks of (rank + 1)
  size_t base;  // the iteration's base element count
};

// all_reduce_sum (float): v[i] = (r+1)*(i%1000+1) + iter  ->  T*(i%1000+1) + W*iter.
void check_all_reduce(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r, iter = rd.iter;
  const double T = rd.T;
  const size_t base = rd.base;
  const size_t n = base + 13 * iter + 1;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * (i % 1000 + 1) + iter);
  comm.all_reduce_sum(v.data(), n)->wait();
  for (size_t i = 0; i < n; ++i)
    expect_equal("all_reduce_sum", i, v[i], static_cast<float>(T * (i % 1000 + 1) + W * iter), r);
}

// all_reduce_sum_f64: v[i] = (r+1)*1e9 + i + 0.5  ->  T*1e9 + W*(i+0.5).
void check_all_reduce_f64(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r;
  const double T = rd.T;
  const size_t base = rd.base;
  const size_t n = base / 4 + 3;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (r + 1) * 1e9 + static_cast<double>(i) + 0.5;
  comm.all_reduce_sum_f64(v.data(), n)->wait();
  for (size_t i = 0; i < n; ++i) expect_equal("all_reduce_sum_f64", i, v[i], T * 1e9 + W * (i + 0.5), r);
}

// reduce_scatter_sum with unequal counts (a zero count when W >= 3, a multi-chunk segment on
// odd iterations, in place on odd iterations): in[i] = (r+1) + i%97 -> T + W*(i%97).
void check_reduce_scatter(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r, iter = rd.iter;
  const double T = rd.T;
  const size_t base = rd.base;
  std::vector<size_t> counts(W);
  for (int j = 0; j < W; ++j) counts[j] = base / 2 + 7 * j + iter;
  if (W >= 3) counts[1] = 0;
  if (iter % 2 == 1) counts[W - 1] += 300000;
  auto off = offsets_of(counts);
  std::vector<float> in(off[W]);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((r + 1) + i % 97);
  std::vector<float> sep(counts[r] + 1, -1.f);
  float* dst = iter % 2 == 1 ? in.data() + off[r] : sep.data();
  comm.reduce_scatter_sum(in.data(), dst, counts)->wait();
  for (size_t k = 0; k < counts[r]; ++k)
    expect_equal("reduce_scatter_sum", k, dst[k], static_cast<float>(T + W * ((off[r] + k) % 97)), r);
  if (dst == sep.data()) expect_equal("reduce_scatter_sum (past the end)", counts[r], sep[counts[r]], -1.f, r);
}

// all_gather with unequal counts (in place on odd iterations): rank j sends j*100000 + k.
void check_all_gather(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r, iter = rd.iter;
  const size_t base = rd.base;
  std::vector<size_t> counts(W);
  for (int j = 0; j < W; ++j) counts[j] = base / 3 + 5 * j + iter;
  if (W >= 3 && iter % 2 == 0) counts[W - 1] = 0;
  auto off = offsets_of(counts);
  std::vector<float> outv(off[W], -1.f);
  std::vector<float> mine(counts[r]);
  for (size_t k = 0; k < counts[r]; ++k) mine[k] = static_cast<float>(r * 100000 + k);
  const float* src = mine.data();
  if (iter % 2 == 1) {
    std::copy(mine.begin(), mine.end(), outv.begin() + static_cast<long>(off[r]));
    src = outv.data() + off[r];
  }
  comm.all_gather(src, outv.data(), counts)->wait();
  for (int j = 0; j < W; ++j)
    for (size_t k = 0; k < counts[j]; ++k)
      expect_equal("all_gather", off[j] + k, outv[off[j] + k], static_cast<float>(j * 100000 + k), r);
}

// all_gather_varying: rank j sends 11 j + iter floats (j * 1000 + k); once gathered whole, then
// again with max_total one below the sum: only the counts come, out is left as it was.
void check_all_gather_varying(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r, iter = rd.iter;
  std::vector<float> mine(11 * static_cast<size_t>(r) + static_cast<size_t>(iter));
  for (size_t k = 0; k < mine.size(); ++k) mine[k] = static_cast<float>(r * 1000 + static_cast<int>(k));
  std::vector<float> outv;
  std::vector<uint64_t> counts;
  size_t total = 0;
  for (int j = 0; j < W; ++j) total += 11 * static_cast<size_t>(j) + static_cast<size_t>(iter);
  comm.all_gather_varying(mine.data(), mine.size(), &outv, &counts, total)->wait();
  expect_equal("all_gather_varying (counts)", 0, counts.size(), static_cast<size_t>(W), r);
  size_t at = 0;
  for (int j = 0; j < W; ++j) {
    const size_t c = 11 * static_cast<size_t>(j) + static_cast<size_t>(iter);
    expect_equal("all_gather_varying (counts)", static_cast<size_t>(j), counts[static_cast<size_t>(j)], c, r);
    for (size_t k = 0; k < c; ++k, ++at)
      expect_equal("all_gather_varying", at, outv[at], static_cast<float>(j * 1000 + static_cast<int>(k)), r);
  }
  std::vector<float> kept(total + 1, -2.f);
  counts.clear();
  if (total > 0) {
    comm.all_gather_varying(mine.data(), mine.size(), &kept, &counts, total - 1)->wait();
    expect_equal("all_gather_varying over max_total (counts)", 0, counts.size(), static_cast<size_t>(W), r);
    for (size_t i = 0; i < kept.size(); ++i)
      expect_equal("all_gather_varying over max_total (untouched)", i, kept[i], -2.f, r);
  }
}

// broadcast of bytes from root = iter % W.
void check_broadcast(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r, iter = rd.iter;
  const int root = iter % W;
  const size_t bytes = 1000 + iter;
  std::vector<uint8_t> b(bytes, 0);
  auto pat = [&](size_t i) { return static_cast<uint8_t>((root * 31 + i * 7 + iter) & 0xff); };
  if (r == root)
    for (size_t i = 0; i < bytes; ++i) b[i] = pat(i);
  comm.broadcast(b.data(), bytes, root)->wait();
  for (size_t i = 0; i < bytes; ++i) expect_equal("broadcast", i, int(b[i]), int(pat(i)), r);
}

// Several operations in flight at once, waited in reverse order.
void check_in_flight(Communicator& comm, const Round& rd) {
  const int W = rd.W, r = rd.r;
  const double T = rd.T;
  const size_t base = rd.base;
  const size_t n = base;
  std::vector<float> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(r + 1);
  std::vector<size_t> counts(W, base / 4 + 1);
  std::vector<float> rs_in(counts[0] * W, static_cast<float>(2 * (r + 1)));
  std::vector<float> rs_out(counts[0]);
  std::vector<float> ag_out(counts[0] * W);
  std::vector<float> ag_in(counts[0], static_cast<float>(r));
  auto w1 = comm.all_reduce_sum(a.data(), n);
  auto w2 = comm.reduce_scatter_sum(rs_in.data(), rs_out.data(), counts);
  auto w3 = comm.all_gather(ag_in.data(), ag_out.data(), counts);
  w3->wait();
  w2->wait();
  w1->wait();
  w1->wait();  // idempotent
  for (size_t i = 0; i < n; ++i) expect_equal("pipelined all_reduce_sum", i, a[i], static_cast<float>(T), r);
  for (size_t i = 0; i < rs_out.size(); ++i)
    expect_equal("pipelined reduce_scatter_sum", i, rs_out[i], static_cast<float>(2 * T), r);
  for (size_t i = 0; i < ag_out.size(); ++i)
    expect_equal("pipelined all_gather", i, ag_out[i], static_cast<float>(i / counts[0]), r);
}

// --fail-rank: this rank fails at iteration `iter` with an error of its own, once the key
// --fail-after-key (if given) is set in the job's store: e.g. another node's launcher's failure
// report, so that a test knows which failure came first.
[[noreturn]] void fail_on_purpose(Communicator& comm, const SelftestOptions& o, int iter, const std::string& tag,
                                  std::ostream& out) {
  if (!o.fail_after_key.empty()) {
#ifdef NANOCHAT_HAVE_GLOO
    auto* g = dynamic_cast<GlooCommunicator*>(&comm);
    if (!g) fail("dist-selftest: --fail-after-key needs the job's store");
    const Ms limit(30000);
    out << tag << "waiting (at most 30 s) for " << o.fail_after_key << " in the job's store before failing"
        << std::endl;
    StoreClientOptions co;
    co.host = g->env().master_addr;
    co.port = g->env().master_port;
    co.job_token = g->options().job_token.value_or("");
    co.connect_timeout = limit;
    co.identity = tag + "--fail-after-key";
    StoreClient(co).get(o.fail_after_key, limit);
#else
    fail("dist-selftest: --fail-after-key needs the job's store (a build with Gloo)");
#endif
  }
  fail("dist-selftest: rank ", comm.rank(), " fails on purpose at iteration ", iter, " (--fail-rank)");
}

}  // namespace

size_t run_selftest(Communicator& comm, const SelftestOptions& opts, std::ostream& out) {
  const int W = comm.world_size(), r = comm.rank();
  const std::string tag = str_cat("dist-selftest: rank ", r, " of ", W, ": ");
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const char* lr = std::getenv("LOCAL_RANK");
  out << tag << "pid " << getpid() << ", LOCAL_RANK=" << (lr ? lr : "") << ", OMP_NUM_THREADS=" << (omp ? omp : "")
      << std::endl;
  size_t checks = 0;

  if (!opts.facts.empty() || !opts.facts_on_rank.empty()) {
    auto facts = opts.facts;
    auto it = opts.facts_on_rank.find(r);
    if (it != opts.facts_on_rank.end())
      for (const auto& kv : it->second) facts[kv.first] = kv.second;
    agree(comm, facts);
    out << tag << "facts agree" << std::endl;
    ++checks;
  }

  for (int iter = 0; iter < opts.iterations; ++iter) {
    if (r == opts.die_rank && iter == opts.die_at) {
      out << tag << "dying now (--die-rank)" << std::endl;
      ::raise(SIGKILL);
    }
    if (r == opts.fail_rank && iter == opts.fail_at) fail_on_purpose(comm, opts, iter, tag, out);
    const Round rd{W, r, iter, W * (W + 1) / 2.0, std::max<size_t>(opts.size, 8)};
    for (auto* check : {check_all_reduce, check_all_reduce_f64, check_reduce_scatter, check_all_gather,
                        check_all_gather_varying, check_broadcast}) {
      check(comm, rd);
      ++checks;
    }
    comm.barrier()->wait();
    ++checks;
    check_in_flight(comm, rd);  // several operations in flight at once
    ++checks;
    out << tag << "iteration " << iter << " ok" << std::endl;
  }
  out << tag << "OK, " << checks << " checks passed" << std::endl;
  return checks;
}

}  // namespace nanochat::cluster
