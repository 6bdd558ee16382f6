#pragma once
// The build id: which nanochat.cpp source a binary was built from. Generated at every build by
// cmake/build_id.cmake (only rewritten when it changes, so a new commit recompiles one file).

namespace nanochat {

/// "<version> (commit <12 hex>)", "<version> (commit <12 hex>, dirty <8 hex>)" when the checkout
/// had uncommitted changes (the 8 hex hash them, so identical changes give identical ids), or
/// "<version> (unknown commit)" for a build outside a git checkout. `nanochat --version` prints
/// it and the startup agreement (cluster/agree.h) compares it between ranks.
const char* build_id();

}  // namespace nanochat
