#pragma once
// Where nanochat keeps its files (nanochat/common.py get_base_dir and dataset.py):
//   $NANOCHAT_BASE_DIR (default ~/.cache/nanochat)/
//     base_data_climbmix/   parquet shards (override the folder with $NANOCHAT_DATA_DIR)
//     tokenizer/            tokenizer files
//     base_checkpoints/<model-tag>/
#include <string>

namespace nanochat {

/// $NANOCHAT_BASE_DIR, else $HOME/.cache/nanochat. Created if missing. Throws nanochat::Error
/// naming the path when it cannot be created.
std::string base_dir();
/// $NANOCHAT_DATA_DIR if set, else base_dir()/base_data_climbmix (not created).
std::string data_dir();
/// base_dir()/tokenizer (not created).
std::string tokenizer_dir();
/// The running program's file (the target of /proc/self/exe), for re-executing or spawning a
/// copy of it under its own name (`ps`, `pgrep nanochat` show the file's name, and "exe" for a
/// program started as /proc/self/exe). "/proc/self/exe" when the link cannot be read.
std::string self_executable();

}  // namespace nanochat
