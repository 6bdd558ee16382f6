// nanochat's command lines as its users type them: `python -m scripts.X` becomes `nanochat -m
// scripts.X`, torchrun's `-m scripts.X -- --flag=value` works after `nanochat run`, and both do
// what the subcommand does (same losses and final weights as `run ... base-train --flag value`).
// A nanochat script without a subcommand yet, or an unknown module, is named (exit status 2).
#include <gtest/gtest.h>

#include <string>

#include "support/cli_util.h"

using namespace nctest;

namespace {

// kTiny's flags in nanochat's --flag=value spelling.
std::string equals_form(const std::string& flags) {
  std::string out;
  size_t i = 0;
  while (i < flags.size()) {
    const size_t flag = flags.find(" --", i);
    if (flag == std::string::npos) break;
    const size_t name_end = flags.find(' ', flag + 1);
    const size_t value_end = name_end == std::string::npos ? std::string::npos : flags.find(' ', name_end + 1);
    out += flags.substr(flag, name_end - flag) + "=" +
           flags.substr(name_end + 1, value_end == std::string::npos ? std::string::npos : value_end - name_end - 1);
    i = value_end == std::string::npos ? flags.size() : value_end;
  }
  return out;
}

}  // namespace

TEST(ScriptNames, TorchrunModuleFormTrainsLikeTheSubcommand) {
  const std::string tiny = std::string(kTiny).substr(std::string(" base-train").size());
  const std::string flags = equals_form(tiny);
  ASSERT_NE(flags.find(" --depth=2"), std::string::npos) << flags;
  ASSERT_NE(flags.find(" --model-tag=t"), std::string::npos) << flags;

  BaseDir a("nc_names_a"), b("nc_names_b");
  const std::string port = std::to_string(free_port());
  auto ra = run(a, " run --nproc-per-node 1 --master-port " + port + " base-train" + tiny + " --num-iterations 2");
  ASSERT_EQ(ra.code, 0) << ra.out;
  auto rb = run(b, " run --standalone --nproc_per_node=1 --master_port=" + port + " -m scripts.base_train --" + flags +
                       " --num-iterations=2");
  ASSERT_EQ(rb.code, 0) << rb.out;
  EXPECT_EQ(slurp(a.ckpt() + "/model_000002.safetensors"), slurp(b.ckpt() + "/model_000002.safetensors"));

  // python -m form, no launcher: base-eval on the checkpoint
  auto e = run(b, " -m scripts.base_eval --model-tag=t --eval=bpb --split-tokens=256");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("val bpb: "), std::string::npos) << e.out;
}

TEST(ScriptNames, EveryNanochatScriptHasASubcommandOrANamedError) {
  const std::pair<const char*, const char*> usage[] = {
      {"scripts.base_train", "nanochat base-train"}, {"scripts.base_eval", "nanochat base-eval"},
      {"scripts.tok_train", "nanochat tok-train"},   {"scripts.tok_eval", "nanochat tok-eval"},
      {"scripts.chat_cli", "nanochat chat"},         {"scripts.chat_sft", "nanochat chat-sft"},
      {"scripts.chat_eval", "nanochat chat-eval"},   {"scripts.chat_rl", "nanochat chat-rl"},
      {"nanochat.dataset", "nanochat data download"}};
  for (const auto& [module, want] : usage) {
    auto [code, out] = nctest::shell(std::string("timeout 30 ") + NANOCHAT_BINARY + " -m " + module + " --help 2>&1");
    EXPECT_EQ(code, 0) << module << "\n" << out;
    EXPECT_NE(out.find(want), std::string::npos) << module << "\n" << out;
  }
  auto [c1, o1] = nctest::shell(std::string("timeout 30 ") + NANOCHAT_BINARY + " run -m scripts.nope 2>&1");
  EXPECT_EQ(c1, 2) << o1;
  EXPECT_NE(o1.find("-m scripts.nope: nanochat has no such module"), std::string::npos) << o1;
  EXPECT_NE(o1.find("scripts.base_train"), std::string::npos) << o1;
  auto [c2, o2] = nctest::shell(std::string("timeout 30 ") + NANOCHAT_BINARY + " -m 2>&1");
  EXPECT_EQ(c2, 2) << o2;
  EXPECT_NE(o2.find("-m needs a module"), std::string::npos) << o2;
}
