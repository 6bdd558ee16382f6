#include "nanochat/cli/commands.h"

namespace nanochat::cli {

void register_data(CLI::App& app);        // cli/data.cpp: data pack|inspect|download
void register_tok(CLI::App& app);         // cli/tok.cpp: tok-train, tok-eval
void register_run(CLI::App& app);         // cli/run.cpp (+ hidden dist-selftest)
void register_doctor(CLI::App& app);      // cli/doctor.cpp
void register_base_train(CLI::App& app);  // cli/base_train.cpp
void register_base_eval(CLI::App& app);   // cli/base_eval.cpp
void register_chat_sft(CLI::App& app);    // cli/chat_sft.cpp
void register_sample(CLI::App& app);      // cli/sample.cpp
void register_chat(CLI::App& app);        // cli/chat.cpp
void register_chat_eval(CLI::App& app);   // cli/chat_eval.cpp
void register_chat_rl(CLI::App& app);     // cli/chat_rl.cpp
void register_chat_web(CLI::App& app);    // cli/chat_web.cpp
void register_interop(CLI::App& app);     // cli/interop.cpp: export, import
void register_speedrun(CLI::App& app);    // cli/speedrun.cpp
void register_report(CLI::App& app);      // cli/speedrun.cpp
void register_road_probe(CLI::App& app);  // cli/road_job.cpp (hidden)

// Subcommand registrations (one per cli/<name>.cpp). Keep this list in the order of the table in
// docs/architecture.md 1.
void register_all(CLI::App& app) {
  (void)app;
  register_data(app);
  register_tok(app);
  register_run(app);
  register_doctor(app);
  register_base_train(app);
  register_base_eval(app);
  register_chat_sft(app);
  register_sample(app);
  register_chat(app);
  register_chat_eval(app);
  register_chat_rl(app);
  register_chat_web(app);
  register_interop(app);
  register_speedrun(app);
  register_report(app);
  register_road_probe(app);
}

}  // namespace nanochat::cli
