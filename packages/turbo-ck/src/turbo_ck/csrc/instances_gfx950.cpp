// gfx950 (MI350X/MI355X): OCP FP8 (E4M3FN, E5M2). Compiled with --offload-arch=gfx950 -DCK_USE_OCP_FP8.
#include "ck_instances.hpp"

namespace turbo_ck {

int run_gfx950(const Problem& p, std::string* why) {
  return inst::run_arch<ck::f8_ocp_t, ck::bf8_ocp_t>(p, kE4M3, kE5M2, why);
}

}  // namespace turbo_ck
