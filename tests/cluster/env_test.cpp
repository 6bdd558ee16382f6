// The job's environment read by a rank (cluster/env.h): Slurm host lists give the master's name,
// and srun's and mpirun's variables place the rank when torchrun's are absent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "nanochat/cluster/env.h"
#include "nanochat/core/error.h"

using namespace nanochat;
using namespace nanochat::cluster;

TEST(SlurmHostList, FirstHost) {
  EXPECT_EQ(first_host_of_nodelist("node[01-04,07]"), "node01");
  EXPECT_EQ(first_host_of_nodelist("node[07,01-04]"), "node07");
  EXPECT_EQ(first_host_of_nodelist("gpu5,node[1-2]"), "gpu5");
  EXPECT_EQ(first_host_of_nodelist("rack[2-3]-n[8-9]"), "rack2-n8");
  EXPECT_EQ(first_host_of_nodelist("a-b.example.org"), "a-b.example.org");
  EXPECT_THROW(first_host_of_nodelist("node[01-04"), Error);
  EXPECT_THROW(first_host_of_nodelist(""), Error);
}

// Placement read from srun's and mpirun's variables (in this process: set, read, unset).
TEST(ClusterEnv, SrunAndMpirunVariablesPlaceTheRank) {
  auto set = [](std::vector<std::pair<const char*, const char*>> vars) {
    for (const char* n :
         {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
          "SLURM_NODEID", "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
          "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "NANOCHAT_STORE_HOSTED"})
      unsetenv(n);
    for (auto [n, v] : vars) setenv(n, v, 1);
  };
  set({{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_NODEID", "2"},
       {"SLURM_TASKS_PER_NODE", "2(x3),2"},
       {"SLURM_JOB_NODELIST", "gpu[07-10]"}});
  DistEnv e = DistEnv::from_env();
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.store_hosted);
  // A batch script has SLURM_PROCID and SLURM_NTASKS but no SLURM_LOCALID: one process.
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "gpu[07-10]"}});
  EXPECT_EQ(DistEnv::from_env().world_size, 1);
  // torchrun's variables win over Slurm's.
  set({{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "1"},
       {"WORLD_SIZE", "2"},
       {"RANK", "1"},
       {"MASTER_ADDR", "h"},
       {"MASTER_PORT", "1234"}});
  EXPECT_EQ(DistEnv::from_env().world_size, 2);
  set({{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"MASTER_ADDR", "n1"},
       {"MASTER_PORT", "33123"}});
  e = DistEnv::from_env();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "n1");
  EXPECT_EQ(e.master_port, 33123);
  set({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_THROW(DistEnv::from_env(), Error);
  set({});
}
