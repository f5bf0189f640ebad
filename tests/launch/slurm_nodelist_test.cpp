// Slurm's compressed node lists, as SLURM_JOB_NODELIST holds them.
#include <doctest/doctest.h>

#include "launch/slurm_nodelist.hpp"

using kforge::launch::expand_nodelist;
using names = std::vector<std::string>;

TEST_CASE("a plain list and single names") {
  CHECK(*expand_nodelist("n1") == names{"n1"});
  CHECK(*expand_nodelist("alpha,beta") == names{"alpha", "beta"});
}

TEST_CASE("ranges keep the padding of their first bound") {
  CHECK(*expand_nodelist("node[01-04,07]") == names{"node01", "node02", "node03", "node04", "node07"});
  CHECK(*expand_nodelist("gpu[8-11]") == names{"gpu8", "gpu9", "gpu10", "gpu11"});
  CHECK(*expand_nodelist("c[098-101]") == names{"c098", "c099", "c100", "c101"});
}

TEST_CASE("ranges and names mix, and two brackets make every combination") {
  CHECK(*expand_nodelist("login,node[1-2],gpu-a[3]") == names{"login", "node1", "node2", "gpu-a3"});
  CHECK(*expand_nodelist("rack[1-2]-n[1-2]") == names{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(*expand_nodelist("n[1-2].cluster") == names{"n1.cluster", "n2.cluster"});
}

TEST_CASE("a malformed list is an error naming the entry") {
  auto has = [](std::string_view list, std::string_view what) {
    auto r = expand_nodelist(list);
    REQUIRE_FALSE(r.ok());
    INFO(r.message());
    CHECK(r.message().find(what) != std::string::npos);
  };
  has("", "empty node list");
  has("node[01-04", "'[' without ']'");
  has("node01-04]", "']' without '['");
  has("node[4-1]", "runs backwards");
  has("node[a-b]", "is not N or N-M");
  has("node[1,,2]", "is not N or N-M");
  has("n1,,n2", "an empty entry");
  has("n1, n2", "holds a space");
  has("n[1-2],n2", "node n2 is listed twice");
}
