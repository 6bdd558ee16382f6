// The CORE metric against nanochat's own core_eval on the same model and bundle: the fixture model
// of nanochat (tests/fixtures/interop/nanochat, d1 step 3) imported, the handmade bundle of
// tests/fixtures/core_eval/eval_bundle (every task type, zero- and few-shot, custom delimiters),
// and expected.json written by nanochat's evaluate_example / evaluate_task under PyTorch
// (tools/core_eval/make_core_fixture.py): every example's prompts as nanochat's jinja templates
// render them, per-example correctness, per-task accuracy, centered accuracy and CORE, for all
// examples and for --max-per-task 5. Then `base-eval --eval core` prints
// and writes the same numbers, and a missing or malformed bundle names the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "nanochat/checkpoint/model_io.h"
#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"
#include "nanochat/eval/core_eval.h"
#include "nanochat/model/gpt.h"
#include "nanochat/tokenizer/tokenizer.h"
#include "support/cli_util.h"
#include "support/two_nodes.h"

using namespace nctest;

namespace {

std::string fixture(const std::string& rel) { return std::string(NANOCHAT_TEST_DATA) + "/" + rel; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// A base folder holding nanochat's fixture model imported (tag d1, step 3) and the fixture bundle.
struct CoreBase {
  EmptyDir base{"nc_core_eval"};
  CoreBase() {
    auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + base.dir + " timeout 300 " + NANOCHAT_BINARY +
                                     " import --from nanochat " + fixture("interop/nanochat") + " 2>&1");
    EXPECT_EQ(code, 0) << out;
    fs::copy(fixture("core_eval/eval_bundle"), base.dir + "/eval_bundle", fs::copy_options::recursive);
  }
};

}  // namespace

TEST(CoreEval, MatchesNanochatsEvaluateCorePerExampleAndPerTask) {
  CoreBase b;
  ::setenv("NANOCHAT_BASE_DIR", b.base.dir.c_str(), 1);
  LoadedModel lm = load_trained_model("d1", 3);
  const Tokenizer tok = Tokenizer::load(tokenizer_dir());
  const CoreBundle bundle = read_core_bundle(b.base.dir + "/eval_bundle");
  const json expected = json::parse(slurp(fixture("core_eval/expected.json")));
  ASSERT_EQ(expected["runs"].size(), 2u);
  int right = 0, wrong = 0;
  for (const json& run : expected["runs"]) {
    const int64_t max_per_task = run["max_per_task"];
    const CoreResult r = evaluate_core(*lm.model, tok, bundle, max_per_task);
    ASSERT_EQ(r.tasks.size(), run["tasks"].size());
    for (size_t t = 0; t < r.tasks.size(); ++t) {
      const json& want = run["tasks"][t];
      const CoreTaskResult& got = r.tasks[t];
      EXPECT_EQ(got.label, want["label"]);
      const std::vector<bool> want_correct = want["correct"].get<std::vector<bool>>();
      ASSERT_EQ(got.correct.size(), want_correct.size()) << got.label << " max " << max_per_task;
      for (size_t i = 0; i < want_correct.size(); ++i) {
        EXPECT_EQ(got.correct[i] != 0, want_correct[i]) << got.label << " example " << i << " max " << max_per_task;
        (want_correct[i] ? right : wrong) += 1;
      }
      // the prompts: the same examples, few-shot draws and rendering as nanochat's jinja templates
      const CoreTask& task = bundle.tasks[t];
      const std::vector<CoreItem> data = core_task_examples(read_core_task_data(bundle, task), max_per_task);
      ASSERT_EQ(data.size(), want["prompts"].size()) << got.label;
      for (size_t i = 0; i < data.size(); ++i) {
        std::vector<const CoreItem*> shots;
        for (size_t k : core_fewshot_indices(task, data.size(), i)) shots.push_back(&data[k]);
        EXPECT_EQ(render_core_prompts(task, data[i], shots), want["prompts"][i].get<std::vector<std::string>>())
            << got.label << " example " << i << " max " << max_per_task;
      }
      EXPECT_DOUBLE_EQ(got.accuracy, want["accuracy"].get<double>()) << got.label;
      EXPECT_NEAR(got.centered, want["centered"].get<double>(), 1e-12) << got.label;
    }
    EXPECT_NEAR(r.core_metric, run["core_metric"].get<double>(), 1e-12) << max_per_task;
  }
  // the fixture is not trivially all-wrong or all-right
  EXPECT_GT(right, 5);
  EXPECT_GT(wrong, 5);
  ::unsetenv("NANOCHAT_BASE_DIR");
}

TEST(CoreEval, BaseEvalPrintsTheTasksAndWritesNanochatsCsv) {
  CoreBase b;
  const json run = json::parse(slurp(fixture("core_eval/expected.json")))["runs"][1];
  ASSERT_EQ(run["max_per_task"], 5);
  auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + b.base.dir + " timeout 300 " + NANOCHAT_BINARY +
                                   " base-eval -g d1 --eval core --max-per-task 5 --threads 1 2>&1");
  ASSERT_EQ(code, 0) << out;
  char want[256];
  std::snprintf(want, sizeof want, "Evaluating: capitals_mc_3shot (3-shot, type: multiple_choice)... accuracy: %.4f",
                run["tasks"][1]["accuracy"].get<double>());
  EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  std::snprintf(want, sizeof want, "CORE metric: %.4f", run["core_metric"].get<double>());
  EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  const std::string csv = slurp(b.base.dir + "/base_eval/base_model_000003.csv");
  std::snprintf(want, sizeof want, "%-35s, %-10s, %-10s\n", "Task", "Accuracy", "Centered");
  EXPECT_EQ(csv.rfind(want, 0), 0u) << csv;
  std::snprintf(want, sizeof want, "%-35s, %-10.6f, %-10.6f\n", "pronoun_schema",
                run["tasks"][2]["accuracy"].get<double>(), run["tasks"][2]["centered"].get<double>());
  EXPECT_NE(csv.find(want), std::string::npos) << csv;
  std::snprintf(want, sizeof want, "%-35s, %-10s, %-10.6f\n", "CORE", "", run["core_metric"].get<double>());
  EXPECT_NE(csv.find(want), std::string::npos) << csv;

  // nanochat's command line, as runcpu.sh types it
  auto [c2, o2] = nctest::shell("NANOCHAT_BASE_DIR=" + b.base.dir + " timeout 300 " + NANOCHAT_BINARY +
                                " -m scripts.base_eval -- --model-tag=d1 --eval=core --max-per-task=5 2>&1");
  ASSERT_EQ(c2, 0) << o2;
  EXPECT_NE(o2.find("Results written to: " + b.base.dir + "/base_eval/base_model_000003.csv"), std::string::npos) << o2;
}

TEST(CoreEval, AMissingOrMalformedBundleNamesTheFile) {
  CoreBase b;
  const std::string bundle = b.base.dir + "/eval_bundle";
  const std::string cmd = "NANOCHAT_BASE_DIR=" + b.base.dir + " timeout 300 " + NANOCHAT_BINARY;
  // asked for: an error naming the path and where the bundle comes from
  fs::rename(bundle, bundle + ".away");
  auto [c1, o1] = nctest::shell(cmd + " base-eval -g d1 --eval core 2>&1");
  EXPECT_EQ(c1, 1) << o1;
  EXPECT_NE(o1.find(bundle + " is missing"), std::string::npos) << o1;
  EXPECT_NE(o1.find("eval_bundle.zip"), std::string::npos) << o1;
  fs::rename(bundle + ".away", bundle);

  // an unknown task type names core.yaml and the type
  const std::string yaml = slurp(bundle + "/core.yaml");
  std::string bad = yaml;
  bad.replace(bad.find("icl_task_type: schema"), 21, "icl_task_type: generation");
  write_file(bundle + "/core.yaml", bad);
  auto [c3, o3] = nctest::shell(cmd + " base-eval -g d1 --eval core 2>&1");
  EXPECT_EQ(c3, 1) << o3;
  EXPECT_NE(o3.find(bundle + "/core.yaml: icl_tasks[2]: icl_task_type 'generation'"), std::string::npos) << o3;
  write_file(bundle + "/core.yaml", yaml);

  // a line that is not JSON names the file and line
  const std::string data = bundle + "/eval_data/mc/animals.jsonl";
  const std::string rows = slurp(data);
  write_file(data, rows.substr(0, rows.find('\n') + 1) + "{\"query\": \"x\", \"choices\": [\"a\"], \"gold\": 3}\n");
  auto [c4, o4] = nctest::shell(cmd + " base-eval -g d1 --eval core 2>&1");
  EXPECT_EQ(c4, 1) << o4;
  EXPECT_NE(o4.find(data + ":2: gold 3 is outside the 1 options"), std::string::npos) << o4;
  write_file(data, rows);

  // the last task's file is bad: the tasks before it are kept in a partial CSV without CORE
  const std::string last = bundle + "/eval_data/lm/greedy.jsonl";
  write_file(last, "not json\n");
  auto [c5, o5] = nctest::shell(cmd + " base-eval -g d1 --eval core --max-per-task 5 2>&1");
  EXPECT_EQ(c5, 1) << o5;
  const std::string partial = b.base.dir + "/base_eval/base_model_000003_partial.csv";
  EXPECT_NE(o5.find("(task 6 of 6, greedy_lm; the 5 tasks before it are in " + partial + ", without a CORE metric)"),
            std::string::npos)
      << o5;
  const std::string csv = slurp(partial);
  EXPECT_NE(csv.find("counting_lm_2shot"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("CORE"), std::string::npos) << csv;
  EXPECT_FALSE(fs::exists(b.base.dir + "/base_eval/base_model_000003.csv"));
}

TEST(CoreEval, YamlSubsetReadsCoreYamlsConstructs) {
  const json y = parse_yaml_subset(
      "# comment\nicl_tasks:\n- label: a # trailing\n  num_fewshot: [0, 5]\n  continuation_delimiter: \"\\nAnswer: \"\n"
      "  icl_task_type: multiple_choice\n-\n  label: 'b''s'\n  num_fewshot:\n    - 10\n  flag: true\n",
      "t.yaml");
  ASSERT_EQ(y["icl_tasks"].size(), 2u);
  EXPECT_EQ(y["icl_tasks"][0]["label"], "a");
  EXPECT_EQ(y["icl_tasks"][0]["num_fewshot"], json::array({0, 5}));
  EXPECT_EQ(y["icl_tasks"][0]["continuation_delimiter"], "\nAnswer: ");
  EXPECT_EQ(y["icl_tasks"][1]["label"], "b's");
  EXPECT_EQ(y["icl_tasks"][1]["num_fewshot"], json::array({10}));
  EXPECT_EQ(y["icl_tasks"][1]["flag"], true);
  EXPECT_THROW(parse_yaml_subset("a: &anchor x\n", "t.yaml"), nanochat::Error);
  EXPECT_EQ(parse_csv("Eval Task,Random baseline\n\"x, y\",25\r\nz,\"1\"\"\"\n"),
            (std::vector<std::vector<std::string>>{{"Eval Task", "Random baseline"}, {"x, y", "25"}, {"z", "1\""}}));
  EXPECT_EQ(py_strip("\xc2\xa0 a b\t\n\xe3\x80\x80"), "a b");
}

// `data download --eval-bundle` fetches the zip (here a file:// URL; a deflated archive written by
// Python's zipfile like nanochat's) and unpacks its eval_bundle/ folder byte for byte; an archive
// with a name that climbs out of the folder or a corrupt record is refused, naming it.
TEST(CoreEval, DataDownloadUnpacksTheEvalBundle) {
  EmptyDir d("nc_core_bundle_dl");
  const std::string src = fixture("core_eval/eval_bundle");
  const std::string zip = d.dir + "/served.zip", evil = d.dir + "/evil.zip";
  auto [pc, po] = nctest::shell("cd " + src +
                                "/.. && python3 -c \"import zipfile, os\n"
                                "with zipfile.ZipFile('" +
                                zip +
                                "', 'w', zipfile.ZIP_DEFLATED) as z:\n"
                                "    for root, dirs, files in os.walk('eval_bundle'):\n"
                                "        z.write(root)\n"
                                "        [z.write(os.path.join(root, f)) for f in sorted(files)]\n"
                                "with zipfile.ZipFile('" +
                                evil +
                                "', 'w', zipfile.ZIP_DEFLATED) as z:\n"
                                "    z.writestr('eval_bundle/core.yaml', 'icl_tasks: []')\n"
                                "    z.writestr('eval_bundle/../../escaped.txt', 'x')\n\" 2>&1");
  ASSERT_EQ(pc, 0) << po;
  const std::string cmd = "NANOCHAT_BASE_DIR=" + d.dir + "/base timeout 60 " + NANOCHAT_BINARY;
  auto [c1, o1] = nctest::shell(cmd + " data download --eval-bundle --eval-bundle-url file://" + zip + " 2>&1");
  ASSERT_EQ(c1, 0) << o1;
  EXPECT_NE(o1.find("Placed eval_bundle directory at " + d.dir + "/base/eval_bundle (8 files)"), std::string::npos)
      << o1;
  for (const char* rel :
       {"core.yaml", "eval_meta_data.csv", "eval_data/mc/capitals.jsonl", "eval_data/lm/greedy.jsonl"})
    EXPECT_EQ(slurp(d.dir + "/base/eval_bundle/" + rel), slurp(src + "/" + rel)) << rel;
  EXPECT_FALSE(fs::exists(d.dir + "/base/eval_bundle.zip"));

  auto [c2, o2] = nctest::shell("NANOCHAT_BASE_DIR=" + d.dir + "/b2 timeout 60 " + NANOCHAT_BINARY +
                                " data download --eval-bundle --eval-bundle-url file://" + evil + " 2>&1");
  EXPECT_EQ(c2, 1) << o2;
  EXPECT_NE(o2.find("record 'eval_bundle/../../escaped.txt' has a name that leaves the target folder"),
            std::string::npos)
      << o2;
  EXPECT_FALSE(fs::exists(d.dir + "/escaped.txt"));

  // one flipped byte in a deflated record: its CRC32 (or the inflate) fails, naming the record
  std::string bytes = slurp(zip);
  const size_t at = bytes.find("eval_bundle/core.yaml") + std::string("eval_bundle/core.yaml").size() + 8;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x20);
  write_file(zip, bytes);
  auto [c3, o3] = nctest::shell("NANOCHAT_BASE_DIR=" + d.dir + "/b3 timeout 60 " + NANOCHAT_BINARY +
                                " data download --eval-bundle --eval-bundle-url file://" + zip + " 2>&1");
  EXPECT_EQ(c3, 1) << o3;
  EXPECT_NE(o3.find("record 'eval_bundle/core.yaml'"), std::string::npos) << o3;
}

namespace {

// The fixture bundle without its last task (its empty delimiter needs a tokenizer that does not
// merge across the boundary, which the test tokenizer does), as a user gets it offline:
// scripts/core_fixture_bundle.sh (which refuses to replace a bundle without --force).
void copy_bundle_without_greedy(const std::string& base) {
  const std::string script = std::string(NANOCHAT_SOURCE_DIR) + "/scripts/core_fixture_bundle.sh";
  auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + base + " bash " + script + " 2>&1");
  ASSERT_EQ(code, 0) << out;
  ASSERT_NE(out.find("Wrote the fixture CORE bundle (5 tasks) to " + base + "/eval_bundle"), std::string::npos) << out;
  EXPECT_EQ(slurp(base + "/eval_bundle/core.yaml").find("greedy_lm"), std::string::npos);
  auto [again, again_out] = nctest::shell("NANOCHAT_BASE_DIR=" + base + " bash " + script + " 2>&1");
  EXPECT_EQ(again, 1) << again_out;
  EXPECT_NE(again_out.find("already exists"), std::string::npos) << again_out;
}

// "Step 00004 | CORE metric: 0.1234" -> "0.1234" ("" when absent).
std::string core_at(const std::string& out, int step) {
  char key[64];
  std::snprintf(key, sizeof key, "Step %05d | CORE metric: ", step);
  const size_t at = out.find(key);
  return at == std::string::npos ? "" : out.substr(at + std::strlen(key), 6);
}

const char* kTrainCore =
    " base-train --depth 3 --aspect-ratio 32 --head-dim 32 --max-seq-len 64 --window-pattern SL"
    " --device-batch-size 2 --total-batch-size 512 --eval-every -1 --sample-every -1 --threads 1 --model-tag c"
    " --num-iterations 4 --warmup-steps 1 --core-metric-every 2 --core-metric-max-per-task 5";

}  // namespace

// base-train's CORE (--core-metric-every, nanochat base_train): at step 2 and the last step, on one
// process and shared by two nodes; each equals base-eval's CORE of the checkpoint saved there.
TEST(CoreEval, BaseTrainEvaluatesCoreOnOneAndTwoNodesLikeBaseEval) {
  BaseDir one("nc_core_train1"), n0("nc_core_train0");
  EmptyDir n1("nc_core_train_w");
  copy_bundle_without_greedy(one.dir);
  copy_bundle_without_greedy(n0.dir);
  copy_bundle_without_greedy(n1.dir);  // every rank reads the bundle
  auto base_eval_core = [](const std::string& dir) {
    auto [code, out] = nctest::shell("NANOCHAT_BASE_DIR=" + dir + " timeout 300 " + NANOCHAT_BINARY +
                                     " base-eval -g c --eval core --max-per-task 5 --threads 1 2>&1");
    EXPECT_EQ(code, 0) << out;
    const size_t at = out.find("CORE metric: ");
    return at == std::string::npos ? std::string() : out.substr(at + 13, 6);
  };
  const Result r = run_at(one.dir, kTrainCore, "");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_NE(core_at(r.out, 2), "") << r.out;
  ASSERT_NE(core_at(r.out, 4), "") << r.out;
  EXPECT_EQ(core_at(r.out, 4), base_eval_core(one.dir)) << r.out;
  EXPECT_NE(slurp(one.ckpt("c") + "/metrics.jsonl").find("\"core_metric\""), std::string::npos);

  const auto [r0, r1] = two_nodes(n0.dir, n1.dir, kTrainCore, "");
  ASSERT_EQ(r0.code, 0) << r0.out << "\n--- node 1:\n" << r1.out;
  ASSERT_NE(core_at(r0.out, 4), "") << r0.out;
  EXPECT_EQ(core_at(r0.out, 4), base_eval_core(n0.dir)) << r0.out;

  // a worker without the bundle: skipped with a note naming the rank, the run goes on
  fs::remove_all(n1.dir + "/eval_bundle");
  fs::remove_all(n0.ckpt("c"));
  const auto [s0, s1] = two_nodes(n0.dir, n1.dir, kTrainCore, "");
  ASSERT_EQ(s0.code, 0) << s0.out;
  EXPECT_NE(s0.out.find("NOTE: the CORE metric (--core-metric-every) is skipped: rank 1 cannot read its eval bundle"),
            std::string::npos)
      << s0.out;
  EXPECT_EQ(core_at(s0.out, 4), "") << s0.out;
}
