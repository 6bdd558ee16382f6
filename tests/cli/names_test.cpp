// Mistyped commands and flags through the binary: the unknown name is named, the closest valid one
// is suggested, and the exit status is 2 (also when --help follows the typo).
#include <gtest/gtest.h>

#include <string>

#include "support/proc_util.h"

namespace {

struct Out {
  int code;
  std::string text;  // stdout and stderr
};

Out nanochat(const std::string& args) {
  auto [code, text] = nctest::shell(std::string("timeout 30 ") + NANOCHAT_BINARY + " " + args);
  return {code, text};
}

TEST(CliNames, MistypedCommandSuggestsTheClosest) {
  Out r = nanochat("base-trian --depth 4");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("unknown command 'base-trian'"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("did you mean 'base-train'?"), std::string::npos) << r.text;

  r = nanochat("data pakc in.jsonl --out x");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("unknown command 'pakc' for 'nanochat data'; did you mean 'pack'?"), std::string::npos)
      << r.text;
}

TEST(CliNames, MistypedFlagSuggestsTheClosestOfThatCommand) {
  for (const char* args : {"base-train --dept 4", "base-train --depth 4 --dept=4"}) {
    Out r = nanochat(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.text;
    EXPECT_NE(r.text.find("unknown flag '--dept' for 'nanochat base-train'; did you mean '--depth'?"),
              std::string::npos)
        << args << "\n"
        << r.text;
  }
  Out r = nanochat("sample --temprature 0.5");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("did you mean '--temperature'?"), std::string::npos) << r.text;
}

TEST(CliNames, UnknownCommandWithHelpIsAnErrorNotTheTopLevelHelp) {
  Out r = nanochat("publish --help");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("unknown command 'publish'"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("base-train"), std::string::npos) << "lists the commands\n" << r.text;
  EXPECT_EQ(r.text.find("Usage:"), std::string::npos) << r.text;
}

TEST(CliNames, RunChecksItsFlagsAndTheRanksCommand) {
  Out r = nanochat("run --nproc-per-node 1 base-trian --depth 1");  // no rank is started
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("did you mean 'base-train'?"), std::string::npos) << r.text;
  r = nanochat("run --nproc 2 base-train");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("unknown flag '--nproc' for 'nanochat run'; did you mean '--nproc-per-node'?"),
            std::string::npos)
      << r.text;
}

TEST(CliNames, ValidCommandLinesAreLeftToTheParser) {
  for (const char* args :
       {"--version", "base-train --help", "sample -s -1 --help", "data pack --help", "base-train --depth=4 --help",
        "run --nproc-per-node 1 --help",
        // a flag without a value followed by an option with one
        "run --allow-loopback-master --master-port 29999 --help", "base-train --recompute-mlp --depth 4 --help"}) {
    Out r = nanochat(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.text;
    EXPECT_EQ(r.text.find("unknown"), std::string::npos) << args << "\n" << r.text;
  }
}

}  // namespace
