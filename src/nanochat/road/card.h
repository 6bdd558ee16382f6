#pragma once
// The report card (nanochat's former report.md): the build, the nodes, each stage's wall time,
// tokens, tok/s, MFU and CPU-hours, one table of the metrics per stage (BASE, SFT, RL), each
// stage's section (core/report_log.h) and links to the training charts. `nanochat report` and
// `nanochat speedrun` write it to <base>/report/report.md, with a copy in the working folder.
// Every number is the one its stage printed (the sections hold them; road/ledger.h the times).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nanochat/core/machine.h"

namespace nanochat::road {

/// A machine of the run, as the card shows it (core/machine.h).
using NodeInfo = MachineInfo;

/// This machine.
inline NodeInfo this_node() { return this_machine(); }

/// The card's markdown from the sections in `report_dir`, the speedrun ledger `ledger` (its
/// "stages" and "plan"; null or empty when the stages were run by hand) and the nodes: those
/// base-train's section lists (every node of a job, with its share of the rows), else `nodes`.
std::string render_card(const std::string& report_dir, const nlohmann::json& ledger, const std::vector<NodeInfo>& nodes,
                        const std::string& base_dir);

/// "1h02m", "3m05s", "12.3s".
std::string duration_text(double seconds);

/// The rows of the metrics table: {metric, base, sft, rl} as printed ("-" where absent).
std::vector<std::vector<std::string>> metrics_table(const std::string& report_dir);

}  // namespace nanochat::road
