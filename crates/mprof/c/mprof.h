/*
 * mprof.h: what the files of libprofdev_mprof.so share (mprof.c, the
 * accounting; wrappers.c, the return addresses a site is found past;
 * attach.c, loading into a running process). One shared object: these
 * names are hidden (-fvisibility=hidden), EXPORT ones are the program's.
 */
#ifndef PROFDEV_MPROF_H
#define PROFDEV_MPROF_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <unwind.h>

#include "sigsafe_out.h"

/* attach.c: an attached process's settings (else the environment's). */
const char *mprof_getenv(const char *name);
#define getenv mprof_getenv

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

extern void *__sbrk(intptr_t);
extern void *__curbrk;

/* The library's own mappings go straight to the kernel: its exported mmap
 * and munmap are the program's (pools 2 and 3). */
static inline void *sys_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, a, n, prot, flags, fd, off);
}
static inline int sys_munmap(void *a, size_t n)
{
    return (int)syscall(SYS_munmap, a, n);
}

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* mprof.c: the loaded object holding pc (glibc 2.35's lock-free
 * _dl_find_object where present, else dladdr1); 0 if none. */
const struct link_map *mprof_link_map_of(uintptr_t pc);

/* wrappers.c: the allocator wrappers (by symbol, from each module's
 * .symtab and .dynsym) and system code (the functions profdev found
 * declared in system headers: crates/mprof/src/system.rs), which a site
 * is found past. Init: extra wrappers (PROFDEV_MPROF_WRAPPERS, comma
 * separated, may be 0) and the file of system code (may be 0); 0 if the
 * tables cannot be had. */
int mprof_wrappers_init(const char *extra, const char *system_file);
/* Read a module's symbols (and find its system code) once. */
void mprof_scan_module(const struct link_map *lm);
/* Whether the instruction at pc lies in a wrapper or in system code. */
int mprof_skipped(uintptr_t pc);
/* Take (1) or release (0) the scan's lock (fork). */
void mprof_scan_lock(int take);

/* unwind.c: the walk with unwind tables (PROFDEV_MPROF_UNWIND_DIR).
 * The stack pointer of the site's frame, as the exported function that
 * took the call saw it (0: unknown). */
extern __thread uintptr_t mprof_site_sp __attribute__((tls_model("initial-exec")));
/* Whether tables were given (looked up once). */
int mprof_unwind_ready(void);
/* A walk's reads of the stack, in order (for mprof.c's memo of stacks):
 * the address and the word read of each (n of them; more than
 * MPROF_WREC: too many to keep), and whether the walk used the frame
 * pointer it started from (not only ones it read). The same start (pc,
 * sp, and fp if used) and the same words at these addresses make the
 * same walk. */
#define MPROF_WREC 29
struct mprof_wrec {
    int n, fp;
    /* Set by mprof_unwind_walk: own, the walk used and kept the thread's
     * last walk; same, it gave the very frames the last one did. */
    int own, same;
    uintptr_t addr[MPROF_WREC], val[MPROF_WREC];
};
/* A thread's last walk, kept so that the next one, once it reaches one
 * of its frames (the same return address and stack pointer, and frame
 * pointer if the rest used it) with every word read above it unchanged,
 * takes the rest of the frames from it instead of stepping through them
 * (issue 29: the frames above an allocation are mostly the same from one
 * to the next; cc1's walks were 17 frames deep at 97 instructions a
 * step). Kept outermost frame first, so that a walk that took the rest
 * rewrites only the frames below: frame t (the walk's frame n-1-t) has
 * its pc, the stack and frame pointers it was reached with, whether the
 * walk from it used that frame pointer, and q[t]: the reads made from
 * its step on are ra/rv[0..q[t]) (every word that decided the walk: a
 * return address, or a saved frame pointer whose value a later step
 * used; the same words give the same frames). The w*
 * fields are the walk under way's own frames and reads, in the order
 * made. n is 0 when nothing is kept; inuse: a walk is under way (a
 * signal handler's walk meanwhile leaves it alone). */
#define MPROF_LAST_FRAMES 64
#define MPROF_LAST_READS 128
struct mprof_last {
    int inuse, n, whole, wnr; /* whole: the walk ended by itself (not at max) */
    uint32_t stk, si; /* its stack and site, set by the caller (stk 0: none) */
    uintptr_t pc[MPROF_LAST_FRAMES], sp[MPROF_LAST_FRAMES], fp[MPROF_LAST_FRAMES];
    uint8_t fpuse[MPROF_LAST_FRAMES], q[MPROF_LAST_FRAMES];
    uintptr_t ra[MPROF_LAST_READS], rv[MPROF_LAST_READS];
    uintptr_t wsp[MPROF_LAST_FRAMES], wfp[MPROF_LAST_FRAMES];
    uint8_t wfpuse[MPROF_LAST_FRAMES], wq0[MPROF_LAST_FRAMES], wused[MPROF_LAST_READS];
    uintptr_t wra[MPROF_LAST_READS], wrv[MPROF_LAST_READS];
};
/* pcs[0] is the site (a return address), sp and fp its frame's stack and
 * frame pointers; callers follow, at most max in all, every read checked
 * to lie in [here, hi) (and recorded in rec; where the rest came from
 * last, its reads kept there). The depth. last: the thread's last walk
 * (0: none), read and updated. */
int mprof_unwind_walk(uintptr_t *pcs, int max, uintptr_t sp, uintptr_t fp, uintptr_t here,
                      uintptr_t hi, struct mprof_wrec *rec, struct mprof_last *last);
/* One frame up by a table rule alone: from the frame of return address
 * *pc (its stack and frame pointers *sp, *fp) to its caller's, every
 * read checked to lie in [*sp, hi). 0 (nothing changed) where the frame
 * has no table rule of the common kinds or a check fails. */
int mprof_unwind_step(uintptr_t *pc, uintptr_t *sp, uintptr_t *fp, uintptr_t hi);
/* The packed rule of the frame whose return address is pc (cached; a
 * table built on request if need be): kind in bits 0-7 (1 CFA=rsp+N, 2
 * CFA=rbp+N, others no step), N in bits 8-39, the saved rbp's offset
 * from the CFA in bits 40-55 (0: not saved). */
uint64_t mprof_unwind_rule(uintptr_t pc);
/* mprof_unwind_step with the frame's rule r already in hand. */
static inline int mprof_rule_step(uint64_t r, uintptr_t *pc, uintptr_t *sp, uintptr_t *fp,
                                  uintptr_t hi)
{
    unsigned kind = r & 0xff;
    if (kind != 1 && kind != 2)
        return 0;
    int32_t cfa_off = (int32_t)(uint32_t)(r >> 8);
    int16_t rbp_off = (int16_t)(uint16_t)(r >> 40);
    uintptr_t floor = *sp, nfp = *fp;
    uintptr_t cfa = (kind == 1 ? *sp : *fp) + (intptr_t)cfa_off;
    /* [a, a+8) a word of the stack: 8-aligned, at or above floor, below hi */
#define MPROF_OK_WORD(a) (!((a) & 7) && (a) >= floor && (a) < hi && hi - (a) >= 8)
    if (cfa <= floor || !MPROF_OK_WORD(cfa - 8))
        return 0;
    uintptr_t ra = *(const uintptr_t *)(cfa - 8);
    if (rbp_off) {
        uintptr_t a = cfa + (intptr_t)rbp_off;
        if (!MPROF_OK_WORD(a))
            return 0;
        nfp = *(const uintptr_t *)a;
    }
#undef MPROF_OK_WORD
    if (ra < 4096)
        return 0;
    *pc = ra;
    *sp = cfa;
    *fp = nfp;
    return 1;
}
/* A word of the stack at a, read, and recorded in rec. */
static inline uintptr_t mprof_read(struct mprof_wrec *rec, uintptr_t a)
{
    uintptr_t v = *(const uintptr_t *)a;
    if (rec->n < MPROF_WREC) {
        rec->addr[rec->n] = a;
        rec->val[rec->n] = v;
    }
    rec->n++;
    return v;
}

#endif
