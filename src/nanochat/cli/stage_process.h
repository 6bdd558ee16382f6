#pragma once
// One command of a speedrun stage as a child process (cli/speedrun.cpp): this binary (or a
// script) with its arguments, its stdout and stderr read line by line through one pipe, each line
// shown on our stdout, appended to the stage's log file and passed to `on_line` (the road's
// progress). The child dies with us (PR_SET_PDEATHSIG): a killed speedrun leaves no stage running.
#include <functional>
#include <string>
#include <vector>

namespace nanochat::cli {

/// Runs `program` with `args` (argv[0] = program), the environment as ours. Returns its exit
/// status (128 + N when killed by signal N). Throws nanochat::Error when it cannot be started or
/// `log_path` cannot be opened.
/// SIGINT, SIGTERM and SIGHUP received while it runs are passed on to the child (which stops as
/// its command does on that signal) and remembered: stop_signal() names the last one.
int run_stage_process(const std::string& program, const std::vector<std::string>& args, const std::string& log_path,
                      const std::function<void(const std::string&)>& on_line);

/// The signal that stopped the last stage process (SIGINT, SIGTERM, SIGHUP), 0 when none came.
int stop_signal();

}  // namespace nanochat::cli
