// `base-train --dtype`: a bfloat16 run trains and records its dtype, a resume with another dtype
// says so, and a CPU (or oneDNN capped by ONEDNN_MAX_CPU_ISA) without native bf16 refuses the flag
// with a message naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "nanochat/kernels/gemm_bf16.h"
#include "support/cli_util.h"

using json = nlohmann::json;
using namespace nanochat;
using namespace nctest;

TEST(Dtype, Bfloat16RunTrainsRecordsItsDtypeAndAResumeSaysSo) {
  if (!native_bf16_available())
    GTEST_SKIP() << "no native bfloat16 on this CPU/build (" << native_bf16_status()
                 << "): --dtype bfloat16 is refused here (see RefusedWhereOneDnnHasNoBf16)";
  BaseDir b("nc_dtype_bf16");
  auto r = run(b, std::string(kTiny) + " --num-iterations 6 --save-every 3 --dtype bfloat16");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("dtype bfloat16 (bf16 matrix products"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Measured bf16 dot-product (vdpbf16ps) peak"), std::string::npos) << r.out;
  const auto l = losses(b.ckpt() + "/metrics.jsonl");
  ASSERT_EQ(l.size(), 6u);
  for (const auto& [step, loss] : l) EXPECT_TRUE(std::isfinite(loss)) << "step " << step;
  EXPECT_LT(l.at(5), l.at(0));
  std::ifstream meta(b.ckpt() + "/meta_000006.json");
  ASSERT_TRUE(meta) << "no meta_000006.json";
  EXPECT_EQ(json::parse(meta).value("dtype", std::string()), "bfloat16");

  // resuming the bf16 checkpoint in float32 (the default) continues and says so
  auto r2 = run(b, std::string(kTiny) + " --num-iterations 6 --save-every 3 --resume-from-step 3");
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_NE(r2.out.find("was trained with --dtype bfloat16; this run continues with --dtype float32"),
            std::string::npos)
      << r2.out;
  // the same dtype resumes silently
  auto r3 = run(b, std::string(kTiny) + " --num-iterations 6 --save-every 3 --resume-from-step 3 --dtype bfloat16");
  ASSERT_EQ(r3.code, 0) << r3.out;
  EXPECT_EQ(r3.out.find("was trained with --dtype"), std::string::npos) << r3.out;
}

TEST(Dtype, RefusedWhereOneDnnHasNoBf16) {
  BaseDir b("nc_dtype_refuse");
  // oneDNN's own cap below its bf16 kernels stands for a CPU without them
  auto r = run(b, std::string(kTiny) + " --num-iterations 1 --dtype bfloat16", "ONEDNN_MAX_CPU_ISA=AVX512_CORE");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--dtype bfloat16 needs a CPU with native bfloat16 instructions"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 00000"), std::string::npos) << "it trained before refusing:\n" << r.out;
}

TEST(Dtype, UnknownDtypeIsRefused) {
  BaseDir b("nc_dtype_unknown");
  auto r = run(b, std::string(kTiny) + " --num-iterations 1 --dtype half");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--dtype must be float32 or bfloat16 (got 'half')"), std::string::npos) << r.out;
}
