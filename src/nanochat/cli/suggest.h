#pragma once
// Mistyped commands and flags: names the unknown one and suggests the closest valid one before
// CLI11 parses (CLI11 alone says "A subcommand is required", lists unexpected arguments without a
// hint, or prints the top-level help for `nanochat typo --help`).
#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat::cli {

/// Optimal-string-alignment edit distance between a and b: insertions, deletions, substitutions
/// and transpositions of adjacent characters each cost 1 ("trian" -> "train" is 1).
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `typed`, or "" when none is close enough to be a plausible typo
/// (distance <= max(2, |typed| / 3) and below typed's length without dashes, or `typed` is an
/// abbreviation of 3+ characters of exactly one candidate).
std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates);

/// Walks argv[1..argc) through `app`'s subcommand tree the way CLI11 will and returns "" when every
/// command name and every flag is known, else a one-line message such as
///   unknown command 'base-trian' for 'nanochat'; did you mean 'base-train'? (see nanochat --help)
///   unknown flag '--dept' for 'nanochat base-train'; did you mean '--depth'? (see ... --help)
/// Flags are checked against the subcommand they follow (--name, --name=value, -x, -xVALUE);
/// values of value-taking options and negative numbers are skipped; everything after "--" is
/// left alone, except that a command-prefix subcommand (`run`) passes its command line on to a
/// nanochat subcommand, which is checked against the top-level app. Hidden commands and flags
/// (group "") are accepted but never suggested. Throws nothing.
std::string check_names(const CLI::App& app, int argc, const char* const* argv);

/// A flag for another command, --<command>.<flag>[=VALUE] (`nanochat speedrun` takes them for
/// its stages): "" when <command> is a command of `top` and <flag> one of its flags (then
/// `takes_value` says whether it takes a value), else the error naming what is wrong.
std::string check_stage_flag(const CLI::App& top, const std::string& token, bool& takes_value);

}  // namespace nanochat::cli
