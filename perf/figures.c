/* Derived figures (figures.h): one formula each. */
#include "perf/figures.h"

#include <math.h>

static bool positive(double x)
{
    return isfinite(x) && x > 0;
}

double kl_fig_gbs(double bytes, double us)
{
    return positive(bytes) && positive(us) ? bytes / (us * 1e3) : NAN;
}

double kl_fig_tflops(double flops, double us)
{
    return positive(flops) && positive(us) ? flops / (us * 1e6) : NAN;
}

double kl_fig_frac(double value, double ceiling)
{
    return positive(ceiling) && isfinite(value) ? value / ceiling : NAN;
}

double kl_fig_dram_pct(double dram_read_bytes, double dram_write_bytes, double us, double copy_gbs)
{
    if (!(dram_read_bytes >= 0) || !(dram_write_bytes >= 0)) return NAN;
    const double bytes = dram_read_bytes + dram_write_bytes;
    if (bytes == 0 && positive(us) && positive(copy_gbs)) return 0;
    return 100 * kl_fig_frac(kl_fig_gbs(bytes, us), copy_gbs);
}

double kl_fig_l2_hit_pct(double counter_pct)
{
    return counter_pct >= 0 && counter_pct <= 100 ? counter_pct : NAN;
}

const char *kl_fig_roof(double dram_pct, double tensor_pipe_pct)
{
    const double mem = isfinite(dram_pct) ? dram_pct / 100 : 0,
                 tc = isfinite(tensor_pipe_pct) ? tensor_pipe_pct / 100 : 0;
    if (mem < KL_FIG_ROOF_SHARE && tc < KL_FIG_ROOF_SHARE) return "neither roof";
    return tc > mem ? "tensor-bound" : "memory-bound";
}

double kl_fig_ridge(double copy_gbs, double gemm_tflops)
{
    return positive(copy_gbs) && positive(gemm_tflops) ? gemm_tflops * 1e12 / (copy_gbs * 1e9) : NAN;
}

const char *kl_fig_model_bound(double flops, double bytes, double copy_gbs, double gemm_tflops)
{
    const double ridge = kl_fig_ridge(copy_gbs, gemm_tflops);
    if (!positive(bytes) || !isfinite(ridge) || !(flops >= 0)) return "?";
    return flops / bytes < ridge ? "memory" : "compute";
}
