// --launcher and the detection of an MPI, Slurm or torchrun-style launch from the environment,
// and the strict reading of RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and of
// the job's identity (PIPEPLAN_JOB_ID, TORCHELASTIC_RUN_ID).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "runtime/launch.h"

namespace pipeplan {
namespace {

LaunchEnvironment detect(const std::map<std::string, std::string>& variables) {
  return detect_launch_environment([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, ParsesTheFourLaunchers) {
  EXPECT_EQ(parse_launcher("none"), Launcher::none);
  EXPECT_EQ(parse_launcher("mpi"), Launcher::mpi);
  EXPECT_EQ(parse_launcher("env"), Launcher::env);
  EXPECT_EQ(parse_launcher("auto"), Launcher::automatic);
  try {
    parse_launcher("srun");
    FAIL() << "accepted 'srun'";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "launcher");
    EXPECT_EQ(e.detail(), "unknown launcher 'srun' (none, mpi, env, auto)");
  }
}

TEST(Launch, DetectsMpirunMpichAndSlurmInThatOrder) {
  EXPECT_EQ(detect({}).ranks, 1);
  EXPECT_EQ(detect({}).variable, "");
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}}).variable, "OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(detect({{"PMI_SIZE", "8"}}).ranks, 8);
  EXPECT_EQ(detect({{"SLURM_NTASKS", "2"}}).ranks, 2);
  // srun's step size before the allocation's task count; Open MPI's own before either.
  EXPECT_EQ(detect({{"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"}}).ranks, 4);
  EXPECT_EQ(detect({{"SLURM_NTASKS", "8"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).ranks, 2);
  // Junk is no launch, and is said to be malformed (auto refuses it); 0 is no launch.
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "four"}}).ranks, 1);
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "+4"}}).ranks, 1);  // digits only, as for WORLD_SIZE
  EXPECT_EQ(detect({{"PMI_SIZE", "0"}, {"SLURM_NTASKS", "3"}}).ranks, 3);
  EXPECT_EQ(detect({{"PMI_SIZE", "0"}, {"SLURM_NTASKS", "3"}}).malformed, "");
  EXPECT_EQ(detect({{"SLURM_NTASKS", "-3"}}).malformed,
            "SLURM_NTASKS: '-3' is not a decimal count of ranks (launcher auto reads it for a "
            "multi-process launch; launcher none runs in one process)");
  EXPECT_EQ(detect({{"WORLD_SIZE", "abc"}}).malformed.rfind("WORLD_SIZE: 'abc' is not", 0), 0U);
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_SIZE", "x"}}).ranks, 4);
  // A count of any length above any launch is said to be so, not to be no number.
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "10000000000"}}).malformed,
            "OMPI_COMM_WORLD_SIZE: '10000000000' is above the limit of 1000000 ranks for a "
            "launch (launcher auto reads it for a multi-process launch; launcher none runs in one "
            "process)");
  EXPECT_EQ(detect({{"PMI_SIZE", "0004"}}).ranks, 4);
}

// A launcher variable set but malformed: auto refuses naming it; the launchers given outright
// do not read it.
TEST(Launch, AutoRefusesAMalformedLauncherVariable) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"WORLD_SIZE", "abc"}, {"OMPI_COMM_WORLD_SIZE", "abc"}, {"SLURM_NTASKS", "-3"}}) {
    const LaunchEnvironment environment = detect({{name, value}});
    try {
      choose_launch(Launcher::automatic, environment, true);
      FAIL() << name << "=" << value << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(name + ": '" + value + "' is not", 0), 0U) << e.what();
    }
    EXPECT_EQ(choose_launch(Launcher::none, environment, true), LaunchMode::single);
  }
}

TEST(Launch, AutoUsesMpiForMoreThanOneRank) {
  const LaunchEnvironment one = detect({});
  const LaunchEnvironment four = detect({{"SLURM_NTASKS", "4"}});
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, one, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, detect({{"PMI_SIZE", "1"}}), true));
  EXPECT_TRUE(runs_under_mpi(Launcher::automatic, four, true));
  EXPECT_TRUE(runs_under_mpi(Launcher::mpi, one, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::none, four, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::none, four, false));
}

TEST(Launch, WithoutMpiBuiltSaysSoNamingTheLauncher) {
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, detect({}), false));
  try {
    runs_under_mpi(Launcher::mpi, detect({}), false);
    FAIL() << "no error";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "launcher");
    EXPECT_EQ(e.detail().rfind("mpi: MPI support is not built into this pipeplan", 0), 0U)
        << e.detail();
  }
  try {
    runs_under_mpi(Launcher::automatic, detect({{"SLURM_NTASKS", "4"}}), false);
    FAIL() << "no error";
  } catch (const FieldError& e) {
    EXPECT_NE(e.detail().find("started as one of 4 ranks (SLURM_NTASKS=4)"), std::string::npos)
        << e.detail();
  }
}

using Variables = std::map<std::string, std::string>;

Variables torchrun(const std::string& rank = "1", const std::string& world = "4") {
  return {{"RANK", rank},
          {"WORLD_SIZE", world},
          {"LOCAL_RANK", rank},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29500"}};
}

TEST(Launch, DetectsATorchrunLaunchOnlyWithAllItsVariables) {
  EXPECT_EQ(detect(torchrun()).env_ranks, 4);
  EXPECT_EQ(detect(torchrun()).env_variable, "WORLD_SIZE=4");
  EXPECT_EQ(detect(torchrun()).ranks, 1);  // not an MPI launch
  EXPECT_EQ(detect(torchrun("0", "1")).env_ranks, 1);
  // A WORLD_SIZE above any launch is a launch: parse_env_launch names its limit.
  EXPECT_EQ(detect(torchrun("1", "1000000000")).malformed, "");
  EXPECT_EQ(detect(torchrun("1", "1000000000")).env_ranks, 1'000'000);
  for (const char* missing : {"RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    Variables v = torchrun();
    v.erase(missing);
    EXPECT_EQ(detect(v).env_ranks, 1) << "without " << missing;
    v[missing] = "";
    EXPECT_EQ(detect(v).env_ranks, 1) << "with an empty " << missing;
  }
  // LOCAL_RANK is not needed to detect one (parse_env_launch then asks for it).
  Variables v = torchrun();
  v.erase("LOCAL_RANK");
  EXPECT_EQ(detect(v).env_ranks, 4);
  EXPECT_EQ(detect(torchrun("1", "4x")).env_ranks, 1);
  EXPECT_EQ(detect(torchrun("1", "-4")).env_ranks, 1);
}

TEST(Launch, AutoChoosesByTheVariablesAndRefusesBoth) {
  EXPECT_EQ(choose_launch(Launcher::automatic, detect({}), true), LaunchMode::single);
  EXPECT_EQ(choose_launch(Launcher::automatic, detect(torchrun()), true), LaunchMode::env);
  EXPECT_EQ(choose_launch(Launcher::automatic, detect(torchrun()), false), LaunchMode::env);
  EXPECT_EQ(choose_launch(Launcher::automatic, detect({{"PMI_SIZE", "4"}}), true), LaunchMode::mpi);
  EXPECT_EQ(choose_launch(Launcher::env, detect({}), true), LaunchMode::env);
  EXPECT_EQ(choose_launch(Launcher::mpi, detect(torchrun()), true), LaunchMode::mpi);
  EXPECT_EQ(choose_launch(Launcher::none, detect(torchrun()), true), LaunchMode::single);
  // One launcher's world of one with the other's variables: the other's.
  Variables one_mpi = torchrun();
  one_mpi["OMPI_COMM_WORLD_SIZE"] = "1";
  EXPECT_EQ(choose_launch(Launcher::automatic, detect(one_mpi), true), LaunchMode::env);
  Variables both = torchrun();
  both["SLURM_NTASKS"] = "2";
  try {
    choose_launch(Launcher::automatic, detect(both), true);
    FAIL() << "chose one of two launchers";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "launcher");
    EXPECT_EQ(e.detail(),
              "auto: the environment shows both an MPI or Slurm launch (SLURM_NTASKS=2) and a "
              "torchrun-style one (WORLD_SIZE=4 with RANK, MASTER_ADDR, MASTER_PORT); launcher "
              "mpi or launcher env says which started this process");
  }
  EXPECT_EQ(choose_launch(Launcher::env, detect(both), true), LaunchMode::env);
  EXPECT_EQ(choose_launch(Launcher::mpi, detect(both), true), LaunchMode::mpi);
  EXPECT_THROW(choose_launch(Launcher::mpi, detect({}), false), FieldError);
}

int local_ranks(const Variables& variables) {
  return local_ranks_from_environment([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, TheNodesRankCountComesFromTheLauncher) {
  EXPECT_EQ(local_ranks({}), 0);
  EXPECT_EQ(local_ranks({{"MPI_LOCALNRANKS", "3"}}), 3);
  EXPECT_EQ(local_ranks({{"MPI_LOCALNRANKS", "3"}, {"LOCAL_WORLD_SIZE", "4"}}), 4);
  EXPECT_EQ(local_ranks({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MPI_LOCALNRANKS", "3"}}), 2);
  for (const char* bad : {"4x", "0", "+4", " 4", "99999999"}) {
    try {
      local_ranks({{"LOCAL_WORLD_SIZE", bad}});
      FAIL() << "LOCAL_WORLD_SIZE=" << bad << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("LOCAL_WORLD_SIZE: ", 0), 0u) << e.what();
    }
  }
}

EnvLaunch parse(const Variables& variables) {
  return parse_env_launch([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, ReadsTheTorchrunVariables) {
  const EnvLaunch launch = parse(torchrun("3", "8"));
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 3);
  EXPECT_EQ(launch.address, "127.0.0.1");
  EXPECT_EQ(launch.port, 29500);
  EXPECT_EQ(launch.endpoint(), "127.0.0.1:29500");
  Variables v = torchrun("0", "1");
  v["LOCAL_RANK"] = "0";
  v["MASTER_ADDR"] = "node-01.cluster_a.example";
  v["MASTER_PORT"] = "65535";
  EXPECT_EQ(parse(v).endpoint(), "node-01.cluster_a.example:65535");
  v["MASTER_ADDR"] = "[fe80::1%eth0]";
  EXPECT_EQ(parse(v).address, "fe80::1%eth0");
  v["MASTER_ADDR"] = "fe80::1%2";
  EXPECT_EQ(parse(v).address, "fe80::1%2");
  // A zone is an interface name: nothing a rank would print as more than one line.
  for (const char* zone : {"::1%", "::1%x\ny z", "::1%a b", "[::1%]"}) {
    v["MASTER_ADDR"] = zone;
    EXPECT_THROW(parse(v), Error) << zone;
  }
  v["MASTER_ADDR"] = "::1";
  EXPECT_EQ(parse(v).endpoint(), "[::1]:65535");
}

TEST(Launch, TakesThePortAfterTorchrunsStoreOrTheOneAskedFor) {
  Variables v = torchrun();
  EXPECT_EQ(parse(v).port, 29500);
  EXPECT_EQ(parse(v).port_source, "MASTER_PORT");
  v["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(parse(v).port, 29500);
  // torchrun's agent serves its store on MASTER_PORT: every rank takes the next one.
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(parse(v).port, 29501);
  EXPECT_EQ(parse(v).port_source, "MASTER_PORT + 1");
  EXPECT_EQ(parse(v).endpoint(), "127.0.0.1:29501");
  v["PIPEPLAN_MASTER_PORT"] = "31000";
  EXPECT_EQ(parse(v).port, 31000);
  EXPECT_EQ(parse(v).port_source, "PIPEPLAN_MASTER_PORT");
  v.erase("PIPEPLAN_MASTER_PORT");
  v["MASTER_PORT"] = "65535";
  try {
    parse(v);
    FAIL() << "no port after 65535";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "MASTER_PORT: 65535 is torchrun's store (TORCHELASTIC_USE_AGENT_STORE=True) and no "
              "port follows it; set PIPEPLAN_MASTER_PORT to a free port on every rank");
  }
}

// Leading zeros are decimal digits like any other, whatever the number's length.
TEST(Launch, ReadsLeadingZerosAsDecimal) {
  Variables v = torchrun("0003", "000000000008");
  v["LOCAL_RANK"] = "0000000000000";
  v["MASTER_PORT"] = "0000029500";
  const EnvLaunch launch = parse(v);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_EQ(launch.port, 29500);
  v["PIPEPLAN_MASTER_PORT"] = "000000000031000";
  EXPECT_EQ(parse(v).port, 31000);
}

// The job a rank belongs to: PIPEPLAN_JOB_ID, else torchrun's run id unless it is torchrun's
// default "none" (every job started without --rdzv-id has it).
TEST(Launch, ReadsTheJobsIdentity) {
  Variables v = torchrun();
  EXPECT_EQ(parse(v).job_id, "");
  EXPECT_EQ(parse(v).job_id_source, "");
  EXPECT_EQ(parse(v).job(), "no job identity (PIPEPLAN_JOB_ID, TORCHELASTIC_RUN_ID unset)");
  v["TORCHELASTIC_RUN_ID"] = "none";
  EXPECT_EQ(parse(v).job_id_source, "");
  v["TORCHELASTIC_RUN_ID"] = "train-7";
  EXPECT_EQ(parse(v).job_id, "train-7");
  EXPECT_EQ(parse(v).job(), "TORCHELASTIC_RUN_ID='train-7'");
  v["PIPEPLAN_JOB_ID"] = "a\nb";
  EXPECT_EQ(parse(v).job_id, "a\nb");
  EXPECT_EQ(parse(v).job(), "PIPEPLAN_JOB_ID='a?b'");               // one line, whatever it holds
  v["TORCHELASTIC_RUN_ID"] = std::string(kMaxJobIdBytes + 1, 'j');  // not read: the other wins
  EXPECT_EQ(parse(v).job_id_source, "PIPEPLAN_JOB_ID");
  v["PIPEPLAN_JOB_ID"] = std::string(kMaxJobIdBytes, 'j');
  EXPECT_EQ(parse(v).job_id.size(), kMaxJobIdBytes);
}

TEST(Launch, RefusesEachBadOrMissingVariableNamingIt) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"RANK", "",
       "RANK: not set (a torchrun-style launch sets RANK, WORLD_SIZE, LOCAL_RANK, "
       "MASTER_ADDR and MASTER_PORT for every process it starts)"},
      {"RANK", "-1", "RANK: '-1' is not a non-negative decimal integer"},
      {"RANK", "1x", "RANK: '1x' is not a non-negative decimal integer"},
      {"RANK", " 1", "RANK: ' 1' is not a non-negative decimal integer"},
      {"RANK", "+1", "RANK: '+1' is not a non-negative decimal integer"},
      {"RANK", "0x1", "RANK: '0x1' is not a non-negative decimal integer"},
      // A number of any length above its limit is named as such.
      {"RANK", "10000000000",
       "RANK: 10000000000 is not below WORLD_SIZE 4 (ranks are 0 to WORLD_SIZE - 1)"},
      {"RANK", "99999999999999999999999",
       "RANK: 99999999999999999999999 is not below WORLD_SIZE 4"},
      {"RANK", "4", "RANK: 4 is not below WORLD_SIZE 4 (ranks are 0 to WORLD_SIZE - 1)"},
      {"WORLD_SIZE", "0", "WORLD_SIZE: 0 ranks (at least 1: one per plan device)"},
      {"WORLD_SIZE", "four", "WORLD_SIZE: 'four' is not a non-negative decimal integer"},
      {"WORLD_SIZE", "1025",
       "WORLD_SIZE: 1025 ranks, above the limit of 1024 (one rank per plan "
       "device)"},
      {"WORLD_SIZE", "1000000000",
       "WORLD_SIZE: 1000000000 ranks, above the limit of 1024 (one rank per plan device)"},
      {"LOCAL_RANK", "", "LOCAL_RANK: not set"},
      {"LOCAL_RANK", "-2", "LOCAL_RANK: '-2' is not a non-negative decimal integer"},
      {"LOCAL_RANK", "4", "LOCAL_RANK: 4 is not below WORLD_SIZE 4"},
      {"LOCAL_RANK", "00000000004", "LOCAL_RANK: 00000000004 is not below WORLD_SIZE 4"},
      {"MASTER_ADDR", "", "MASTER_ADDR: not set"},
      {"MASTER_ADDR", "node 1",
       "MASTER_ADDR: 'node 1' is not a host name or an IPv4 or IPv6 "
       "address"},
      {"MASTER_ADDR", "-x", "MASTER_ADDR: '-x' is not a host name"},
      {"MASTER_ADDR", "1:2:3", "MASTER_ADDR: '1:2:3' is not a host name"},
      {"MASTER_ADDR", "[node]", "MASTER_ADDR: '[node]' is not an IPv6 address in brackets"},
      {"MASTER_ADDR", "tcp://10.0.0.1", "MASTER_ADDR: 'tcp://10.0.0.1' is not a host name"},
      {"MASTER_PORT", "", "MASTER_PORT: not set"},
      {"MASTER_PORT", "0", "MASTER_PORT: '0' is not a port (a decimal integer, 1 to 65535)"},
      {"MASTER_PORT", "65536", "MASTER_PORT: '65536' is not a port"},
      {"MASTER_PORT", "29500 ", "MASTER_PORT: '29500 ' is not a port"},
      {"MASTER_PORT", "http", "MASTER_PORT: 'http' is not a port"},
      {"MASTER_PORT", "0000000000", "MASTER_PORT: '0000000000' is not a port"},
      {"MASTER_PORT", "100000000029500", "MASTER_PORT: '100000000029500' is not a port"},
      {"PIPEPLAN_JOB_ID", std::string(kMaxJobIdBytes + 1, 'j'),
       "PIPEPLAN_JOB_ID: 1025 bytes, above the limit of 1024"},
      {"TORCHELASTIC_RUN_ID", std::string(kMaxJobIdBytes + 1, 'j'),
       "TORCHELASTIC_RUN_ID: 1025 bytes, above the limit of 1024 (set PIPEPLAN_JOB_ID to a "
       "shorter name of the job on every rank)"},
      {"PIPEPLAN_MASTER_PORT", "0x10", "PIPEPLAN_MASTER_PORT: '0x10' is not a port"},
  };
  for (const auto& [name, value, message] : cases) {
    Variables v = torchrun("1", "4");
    if (value.empty() && name == "PIPEPLAN_MASTER_PORT") continue;
    if (value.empty()) {
      v.erase(name);
    } else {
      v[name] = value;
    }
    try {
      parse(v);
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0U)
          << name << "=" << value << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace pipeplan
