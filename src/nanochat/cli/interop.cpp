// `nanochat export --to nanochat` and `nanochat import --from nanochat`: checkpoints and the
// tokenizer in the layout of Karpathy's nanochat (PyTorch), in both directions
// (checkpoint/interop_nanochat.h).
#include <cstdio>
#include <memory>
#include <string>

#include "nanochat/checkpoint/interop_nanochat.h"
#include "nanochat/cli/commands.h"
#include "nanochat/core/error.h"

namespace nanochat::cli {

namespace {
struct InteropArgs {
  CheckpointChoice ckpt;
  std::string format = "nanochat";
  std::string dir;
  bool with_optimizer = false;
};

void check_format(const std::string& format, const char* flag) {
  if (format != "nanochat") fail(flag, " ", format, ": the only format is 'nanochat' (Karpathy's nanochat, PyTorch)");
}
}  // namespace

void register_interop(CLI::App& app) {
  auto ex = std::make_shared<InteropArgs>();
  CLI::App* e = app.add_subcommand("export", "write a checkpoint and the tokenizer in nanochat's (PyTorch) layout");
  e->add_option("--to", ex->format, "target format (only 'nanochat')")->capture_default_str();
  add_checkpoint_options(e, ex->ckpt);
  add_source_option(e, ex->ckpt, "base");
  e->add_option("--out", ex->dir,
                "nanochat base folder to write (base_checkpoints/<tag>/model_<step>.pt, "
                "meta_<step>.json, tokenizer/tokenizer.pkl, tokenizer/token_bytes.pt)")
      ->required();
  e->add_flag("--with-optimizer", ex->with_optimizer,
              "also write the optimizer state (every rank's shard) as nanochat's optim_<step>_rank0.pt");
  e->callback([ex] {
    check_format(ex->format, "--to");
    const std::string model = export_to_nanochat(
        {ex->ckpt.model_tag, ex->ckpt.step, ex->dir, ex->with_optimizer, parse_checkpoint_source(ex->ckpt.source)});
    std::printf("Exported %s (with its meta and the tokenizer under %s/tokenizer); %s\n", model.c_str(),
                ex->dir.c_str(),
                ex->with_optimizer ? "the optimizer state is in optim_<step>_rank0.pt next to it"
                                   : "the optimizer state is not written (add --with-optimizer)");
  });

  auto im = std::make_shared<InteropArgs>();
  CLI::App* i =
      app.add_subcommand("import", "read a nanochat (PyTorch) checkpoint and tokenizer into NANOCHAT_BASE_DIR");
  i->add_option("--from", im->format, "source format (only 'nanochat')")->capture_default_str();
  i->add_option("dir", im->dir, "nanochat base folder (holding base_checkpoints/ and tokenizer/)")->required();
  add_checkpoint_options(i, im->ckpt);
  i->callback([im] {
    check_format(im->format, "--from");
    const ImportResult r = import_from_nanochat({im->dir, im->ckpt.model_tag, im->ckpt.step});
    const std::string optim = r.optimizer_ranks > 0 ? "The optimizer state comes from nanochat's " +
                                                          std::to_string(r.optimizer_ranks) + "-rank optimizer files"
                                                    : "The optimizer state starts fresh (no optim_<step>_rank<r>.pt)";
    std::printf(
        "Imported %s step %lld into %s. %s and the data loader starts at the start of the data; resume with "
        "base-train --model-tag %s --resume-from-step %lld\n",
        r.tag.c_str(), static_cast<long long>(r.step), r.model_file.c_str(), optim.c_str(), r.tag.c_str(),
        static_cast<long long>(r.step));
  });
}

}  // namespace nanochat::cli
