/* The patch list a module's plan comes with, and which of its patches an
 * attach leaves out for the threads it stopped (hold_hops). Included by
 * covrt.c; also compiled alone by the coverage crate's tests
 * (tests/coverage_hops.rs). */
#ifndef PROFDEV_HOPS_H
#define PROFDEV_HOPS_H
#include <stdint.h>

/* One patch: kind 1 `jmp rel32`, 2 `int3`, 3/4 a call retargeted, 5 `jmp
 * rel8`, 6 a one-shot `int3`; 0 left out. */
/* A patch, and a breakpoint in a module's trap table: kind 2
 * (PATCH_INT3) resumes at `entry`, a trampoline; kind 6 (PATCH_ONCE, hit
 * mode) records block `entry` of its module as run and puts `orig`, the
 * byte it replaced, back (see covrt.c's once()). A breakpoint's length
 * is 1: in the table its `orig` takes that field. */
struct patch {
    uint64_t addr, entry;
    uint32_t kind;
    union {
        uint32_t len, orig;
    };
};

static inline int is_trap(const struct patch *p) {
    return p->kind == 2 || p->kind == 6;
}

/* Bytes the patch overwrites. */
static inline uint32_t patch_len(const struct patch *p) {
    return is_trap(p) ? 1 : p->len;
}

/* Bytes a patch takes on the wire (encode/wire.rs). */
#define WIRE 12

/* Is ps[i] a hop's `jmp rel32` (kind 1), written in the dead bytes of a
 * copied block (its host) for the short block whose `jmp rel8` (kind 5,
 * always next in the list) leads there? */
static int hop_at(const struct patch *ps, uint64_t np, uint64_t i) {
    return ps[i].kind == 1 && i + 1 < np && ps[i + 1].kind == 5 && ps[i + 1].entry == ps[i].addr;
}

/* Attach: a hop's bytes are live code for a thread stopped in its host
 * before the hop's end, whose own patch it will not take: that hop and
 * its `jmp rel8` are left out (kind 0). The host is the last patch
 * before the hop that is no hop's: a thread is in it when no such patch
 * starts between its pc and the hop. The pc 2 bytes back counts too (a
 * system call's restart runs it again). Returns the patches left out. */
static uint64_t hold_hops(struct patch *ps, uint64_t np, const uint64_t *stopped, uint64_t nstopped) {
    uint64_t held = 0;
    for (uint64_t s = 0; s < 2 * nstopped; s++) {
        uint64_t pc = stopped[s / 2] - (s & 1 ? 2 : 0);
        /* The first patch that is no hop's at or after pc; and whether one
         * lies before it (a host). */
        uint64_t next = UINT64_MAX;
        int before = 0;
        for (uint64_t i = 0; i < np; i++) {
            /* (kind 0: a hop held for an earlier pc.) */
            if (ps[i].kind == 0 || ps[i].kind == 5 || hop_at(ps, np, i)) continue;
            if (ps[i].addr >= pc) {
                if (ps[i].addr < next) next = ps[i].addr;
            } else {
                before = 1;
            }
        }
        for (uint64_t i = 0; i + 1 < np; i++) {
            if (!hop_at(ps, np, i)) continue;
            uint64_t slot = ps[i].addr;
            if (pc < slot + 5 && next >= slot && before) {
                held += 2;
                ps[i].kind = ps[i + 1].kind = 0;
            }
        }
    }
    return held;
}

#endif
