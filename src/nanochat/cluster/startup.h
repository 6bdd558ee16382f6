#pragma once
// Start-up barrier (docs/architecture.md 7.8): the ranks of a job start at different speeds (one machine
// loads the tokenizer, the data or a checkpoint from a slow disk, or starts minutes late). The
// first collective would give up after the steady-state collective timeout and blame nobody in
// particular, so before it every rank meets the others through the job's store, with a deadline of
// its own (NANOCHAT_STARTUP_TIMEOUT, default 900 s), printing which ranks it still waits for.
//
// Test-only hook: NANOCHAT_TEST_FAULT=start-delay:R:S makes rank R sleep S seconds before it
// arrives at its first barrier (a slow start-up on one machine). Never set it in real runs.
#include <string>

#include "nanochat/cluster/net.h"
#include "nanochat/comm/communicator.h"

namespace nanochat::cluster {

/// Blocks until every rank of `comm` has called startup_barrier(comm, stage) with the same stage
/// name. World size 1 (or a communicator without a store) returns at once. While it waits, the
/// lowest-numbered rank that has arrived prints to stderr, every wait_report_interval() (env.h),
/// "start-up: waiting for rank 1 (host h, pid 7) to finish starting (20 s of 900 s, ...)".
/// Throws nanochat::Error naming the late rank(s) and their hosts when NANOCHAT_STARTUP_TIMEOUT
/// seconds pass, and at once when a rank that has not arrived died (its store connection dropped)
/// or another rank gave up waiting.
void startup_barrier(Communicator& comm, const std::string& stage);

/// The start-up deadline's length: NANOCHAT_STARTUP_TIMEOUT seconds, default 900 (also bounds the
/// data feed's set-up, feed/feed_link.h).
Ms startup_timeout();

}  // namespace nanochat::cluster
