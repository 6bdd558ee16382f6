#pragma once
// Whole files in and out, for every area that keeps files (checkpoints, tokenizer, data packing,
// nanochat exports, zip and torch archives): one reader, and one crash-safe writer whose readers
// see the old file or the new one, never a part (the pattern of POSIX rename(2): a temporary file
// in the same directory, fsync, rename over the target, fsync the directory).
#include <string>
#include <string_view>

namespace nanochat {

/// All bytes of the file at `path`. Throws nanochat::Error "cannot read <path>: <reason>" when it
/// cannot be opened or read; a non-empty `hint` (what to do) follows as "; <hint>".
std::string read_file(const std::string& path, std::string_view hint = {});

/// A temporary name next to `path`, unique per process and per call ("<path>.tmp.<pid>.<n>"):
/// ranks that are threads of one process (tests) may write the same file of a shared folder at
/// once. checkpoint/checkpoint.h remove_stale_checkpoint_tmp() recognises this form.
std::string atomic_tmp_name(const std::string& path);

/// fsyncs the directory `dir` (so a rename inside it survives a crash). Throws nanochat::Error
/// naming `dir` when it cannot be opened.
void fsync_dir(const std::string& dir);

/// Renames the finished file `tmp` onto `path` and fsyncs the directory of `path`. Throws
/// nanochat::Error naming both when the rename fails.
void rename_into_place(const std::string& tmp, const std::string& path);

/// Writes `data` to `path` atomically: atomic_tmp_name(path), written and fsynced, then
/// rename_into_place(). Throws nanochat::Error naming the file (check that its directory exists
/// and is writable, and that the disk is not full); the temporary file is removed on failure.
void write_file_atomic(const std::string& path, std::string_view data);

}  // namespace nanochat
