#include "nanochat/cluster/regroup.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "nanochat/core/error.h"

namespace nanochat::cluster {

#ifdef NANOCHAT_HAVE_GLOO

namespace {

// Rank 0: the ranks that remain, once each checked in or `wait` passed.
std::vector<int> collect_members(Store& store, int W, int lost, Ms wait) {
  const auto deadline = Clock::now() + wait;
  std::vector<int> members{0};
  for (;;) {
    members.assign(1, 0);
    bool all = true;
    for (int j = 1; j < W; ++j) {
      if (store.try_get(str_cat("regroup/alive/", j))) {
        members.push_back(j);
      } else if (j != lost && !store.try_get(str_cat("dead/", j))) {
        all = false;  // not lost as far as rank 0 knows: give it until the deadline
      }
    }
    if (all || Clock::now() >= deadline) return members;
    std::this_thread::sleep_for(Ms(50));
  }
}

}  // namespace

Regrouped regroup(GlooCommunicator& old, int lost, int64_t step, Ms wait) {
  Store& store = old.store();
  const DistEnv& env = old.env();
  const int me = env.rank;
  Regrouped out;
  if (me == 0) {
    out.members = collect_members(store, env.world_size, lost, wait);
    out.step = step;
    store.set("regroup/members", nlohmann::json{{"members", out.members}, {"step", step}}.dump());
  } else {
    store.set(str_cat("regroup/alive/", me), "1");
    const nlohmann::json j =
        nlohmann::json::parse(store.get("regroup/members", wait + *old.options().rendezvous_timeout));
    out.members = j.at("members").get<std::vector<int>>();
    out.step = j.at("step").get<int64_t>();
  }
  const auto at = std::find(out.members.begin(), out.members.end(), me);
  if (at == out.members.end())
    fail(str_cat("rank ", me, " (job generation ", old.options().generation,
                 "): the job went on without this rank (it did not answer in time: it was frozen, asleep or cut "
                 "off when another rank left); run this node's command again to train with a later job"));
  if (out.members.size() == 1) return out;  // rank 0 alone: no group to form (the caller goes on as one process)
  DistEnv next = env;
  next.rank = static_cast<int>(at - out.members.begin());
  next.world_size = static_cast<int>(out.members.size());
  DistOptions opts = old.options();
  opts.generation += 1;
  out.comm = std::make_unique<GlooCommunicator>(next, opts);
  return out;
}

std::string left_out_message(GlooCommunicator& comm) {
  try {
    const auto v = comm.store().try_get("regroup/members");
    if (!v) return "";
    const auto members = nlohmann::json::parse(*v).at("members").get<std::vector<int>>();
    if (std::find(members.begin(), members.end(), comm.rank()) != members.end()) return "";
    return str_cat("the job went on without this rank (ranks ", nlohmann::json(members).dump(), " of generation ",
                   comm.options().generation,
                   " regrouped while this one did not answer: it was frozen, asleep or cut off); nothing of it "
                   "is lost (node 0 holds the run); run this node's command again to train with a later job");
  } catch (const std::exception&) {
    return "";
  }
}

#endif

}  // namespace nanochat::cluster
