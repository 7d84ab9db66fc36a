// gfx942 (MI300X/MI325X): FNUZ FP8 (E4M3FNUZ, E5M2FNUZ). Compiled with --offload-arch=gfx942 -DCK_USE_FNUZ_FP8.
#include "ck_instances.hpp"

namespace turbo_ck {

int run_gfx942(const Problem& p, std::string* why) {
  return inst::run_arch<ck::f8_fnuz_t, ck::bf8_fnuz_t>(p, kE4M3Fnuz, kE5M2Fnuz, why);
}

}  // namespace turbo_ck
