/* What the emulator's two runtime files (runtime.cpp: fibers, barriers, launches, CUDA calls;
 * instructions.cpp: the instructions) share beyond emulator.h. Not for kernels or drivers. */
#pragma once

#include "emulator.h"

namespace emu {

/* The 32 lanes of a warp-wide instruction, by lane; all must be there (runtime.cpp). */
void by_lane(std::vector<fiber *> &members, fiber *(&lanes)[32], const char *what);
/* A cp.async copy of thread f lands in shared memory (instructions.cpp). */
void land(fiber *f, const cp_copy &cp);
/* "accumulator NAME" or "A fragment NAME" (instructions.cpp). */
std::string operand_name(const reg_group &g);

/* a signalling NaN (arithmetic on it traps, and would change its bits), the low bits naming the group */
constexpr uint32_t kAccPoison = 0x7FA00000u, kAccPoisonMask = 0xFFF00000u;

/* What an emulated CUtensorMap holds (cuTensorMapEncodeTiled in runtime.cpp writes it, the bulk
 * copies in instructions.cpp read it). */
struct emu_map {
    uint64_t magic;
    const unsigned char *base;
    uint64_t dims[3], strides[2];
    uint32_t box[3], elem_bytes;
};
constexpr uint64_t kMapMagic = 0x454d55544d4150ull;

} // namespace emu
