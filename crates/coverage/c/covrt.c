/* profdev coverage runtime: counts every block of the selected modules.
 *
 * Loaded with LD_PRELOAD by `profdev cprof` (launch mode), or dlopen'ed
 * into a running process by the injector and started with
 * profdev_cov_attach() (attach mode). For each module it asks profdev,
 * over the unix socket PROFDEV_COV_SOCK names, for the module's plan,
 * maps the trampolines profdev encodes next to the module and writes the
 * patches. Counts are `incq %gs:8*INDEX`: each thread's GS base is its own
 * counter array (arch_prctl(ARCH_SET_GS)), summed when a report is
 * written. Hit mode's one-shot probes are `int3`s (PATCH_ONCE) that
 * on_trap() turns into a mark and the original byte (once()). Reports go to PROFDEV_COV_OUT as cov.PID.SEQ (O_EXCL|O_NOFOLLOW,
 * 0600) at exit, _exit, before exec, and on a fatal SIGINT/SIGTERM/SIGHUP.
 *
 * fork: the child reports only what it runs after the fork (its totals
 * minus a snapshot the parent takes in the last atfork prepare handler).
 * exec: the image being replaced reports first; the new image loads the
 * runtime afresh (LD_PRELOAD and our variables are put back into an
 * environment that lost them).
 *
 * Call targets (profdev gmon --exact): trampolines of indirect calls and
 * jumps `call *%gs:0` (profdev_cov_record) with the site's key and the
 * target pushed; it counts the pair in the calling thread's table (slot
 * SLOT_TABLE of its array), written by that thread alone. Reports list
 * the pairs (`I` lines, targets resolved to module and link-time address);
 * fork and a report that does not end the image set each pair's base.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <ucontext.h>
#include <unistd.h>

#include "hops.h"
#include "sigsafe_out.h"

#define API __attribute__((visibility("default")))

/* Counters per thread array (64 MiB of address space, reserved lazily). */
#define CAP (1ull << 23)
/* Slots at the start of each thread array that are not counters:
 * 0: the address of profdev_cov_record (trampolines `call *%gs:0`);
 * 1: the thread's table of call targets (NULL until its first record);
 * 2: set while the thread is inside record_target (a signal handler's
 *    record then is lost, counted in slot 4);
 * 3: the array's own address; 4: records lost (summed like counters). */
#define RESERVED 8
#define SLOT_RECORD 0
#define SLOT_TABLE 1
#define SLOT_BUSY 2
#define SLOT_SELF 3
#define SLOT_LOST 4

/* Call targets (profdev gmon --exact): per thread, the (site, target)
 * pairs seen and their counts; `base` is what was already reported
 * (written by the reporting thread only, count by the owner only). */
struct trec {
    uint64_t key, target, count, base;
};
#define TIDX (1u << 20)
#define TREC (1u << 19)
struct ttab {
    uint64_t n;
    uint32_t idx[TIDX];
    struct trec r[TREC];
};
#define MAXMOD 4096
#define MAXTHR (1 << 20)

struct mod {
    uint64_t lo, hi, cb, n, id;
    struct patch *traps; /* its breakpoints (hops.h), by address */
    uint64_t ntraps;
    int wx; /* its one-shot probes' pages were left writable (the launch window) */
};

static struct mod mods[MAXMOD];
static volatile int nmods;
static uint64_t **arrays; /* every thread array ever made */
static volatile int narrays;
static uint64_t next_counter = RESERVED;
static uint64_t *base; /* fork snapshot: totals at the fork */
static uint64_t base_n;
static uint64_t *pending; /* prepare handler's snapshot */
static uint64_t pending_n;
static char sock_path[108];
static char out_dir[4096];
static int active;
static int reported;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_trap;
static uint64_t traps; /* breakpoints taken */
static uint64_t onces; /* one-shot probes taken */
static int mem_fd = -1; /* this process's /proc/self/mem (once()) */
static int mem_reopen(void);

static long raw6(long n, long a, long b, long c, long d, long e, long f) {
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}

static void set_gs(uint64_t *p) { raw6(SYS_arch_prctl, ARCH_SET_GS, (long)p, 0, 0, 0, 0); }

void profdev_cov_record(void);

static uint64_t *new_array(void) {
    void *p = (void *)raw6(SYS_mmap, 0, CAP * 8, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if ((unsigned long)p > -4096UL) return NULL;
    ((uint64_t *)p)[SLOT_RECORD] = (uint64_t)(uintptr_t)profdev_cov_record;
    ((uint64_t *)p)[SLOT_SELF] = (uint64_t)(uintptr_t)p;
    int i = __atomic_fetch_add(&narrays, 1, __ATOMIC_ACQ_REL);
    if (i >= MAXTHR) {
        raw6(SYS_munmap, (long)p, CAP * 8, 0, 0, 0, 0);
        return NULL;
    }
    __atomic_store_n(&arrays[i], (uint64_t *)p, __ATOMIC_RELEASE);
    return p;
}

/* Totals of counters [lo, lo + n) over every thread array, minus the
 * base, into dst[0, n). */
static void totals_at(uint64_t *dst, uint64_t lo, uint64_t n) {
    memset(dst, 0, n * 8);
    int na = __atomic_load_n(&narrays, __ATOMIC_ACQUIRE);
    if (na > MAXTHR) na = MAXTHR;
    for (int t = 0; t < na; t++) {
        uint64_t *a = __atomic_load_n(&arrays[t], __ATOMIC_ACQUIRE);
        if (!a) continue;
        for (uint64_t i = 0; i < n; i++) dst[i] += a[lo + i];
    }
    for (uint64_t i = lo; i < lo + n && i < base_n; i++) dst[i - lo] -= base[i];
}

/* Totals of counters [0, n). */
static void totals(uint64_t *dst, uint64_t n) {
    totals_at(dst, 0, n);
}

/* ---- call targets ---- */

/* Record one call (or jump) of the site whose counter is key/8 to
 * `target`, in the calling thread's table. Called by profdev_cov_record
 * from a trampoline, anywhere in the program's code: it uses the general
 * registers only (the thunk saves them and the flags). */
__attribute__((used, visibility("hidden"), target("general-regs-only"))) void
profdev_cov_record_target(uint64_t key, uint64_t target) {
    uint64_t *a;
    __asm__ volatile("mov %%gs:24, %0" : "=r"(a));
    if (a[SLOT_BUSY]) {
        a[SLOT_LOST]++;
        return;
    }
    a[SLOT_BUSY] = 1;
    __asm__ volatile("" ::: "memory");
    struct ttab *t = (struct ttab *)a[SLOT_TABLE];
    if (!t) {
        void *p = (void *)raw6(SYS_mmap, 0, sizeof(struct ttab), PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if ((unsigned long)p > -4096UL) {
            a[SLOT_LOST]++;
            goto out;
        }
        t = p;
        __atomic_store_n(&a[SLOT_TABLE], (uint64_t)(uintptr_t)t, __ATOMIC_RELEASE);
    }
    uint64_t h = ((key * 0x9e3779b97f4a7c15ull) ^ target) * 0xff51afd7ed558ccdull;
    uint32_t i = (uint32_t)(h >> 44) & (TIDX - 1);
    for (uint32_t probe = 0; probe < TIDX; probe++, i = (i + 1) & (TIDX - 1)) {
        uint32_t e = t->idx[i];
        if (!e) {
            uint64_t n = t->n;
            if (n >= TREC) {
                a[SLOT_LOST]++;
                break;
            }
            t->r[n] = (struct trec){key, target, 1, 0};
            t->idx[i] = (uint32_t)n + 1;
            __atomic_store_n(&t->n, n + 1, __ATOMIC_RELEASE);
            break;
        }
        struct trec *r = &t->r[e - 1];
        if (r->key == key && r->target == target) {
            r->count++;
            break;
        }
    }
out:
    __asm__ volatile("" ::: "memory");
    a[SLOT_BUSY] = 0;
}

/* The trampolines' `call *%gs:0`, with the key (8 * the site's counter)
 * and the target pushed: every register and the flags preserved, the
 * stack aligned for the C function. The arithmetic flags are saved with
 * seto/lahf and restored with add/sahf (popfq costs tens of cycles); the
 * C function changes no other flag (no string instruction, no cld). */
__asm__(".text\n"
        ".globl profdev_cov_record\n"
        ".hidden profdev_cov_record\n"
        ".type profdev_cov_record,@function\n"
        "profdev_cov_record:\n"
        "    push %rax\n"
        "    seto %al\n"
        "    lahf\n"
        "    push %rax\n"
        "    push %rcx\n"
        "    push %rdx\n"
        "    push %rsi\n"
        "    push %rdi\n"
        "    push %r8\n"
        "    push %r9\n"
        "    push %r10\n"
        "    push %r11\n"
        "    push %rbx\n"
        "    mov 96(%rsp), %rdi\n"
        "    mov 104(%rsp), %rsi\n"
        "    mov %rsp, %rbx\n"
        "    and $-16, %rsp\n"
        "    call profdev_cov_record_target\n"
        "    mov %rbx, %rsp\n"
        "    pop %rbx\n"
        "    pop %r11\n"
        "    pop %r10\n"
        "    pop %r9\n"
        "    pop %r8\n"
        "    pop %rdi\n"
        "    pop %rsi\n"
        "    pop %rdx\n"
        "    pop %rcx\n"
        "    pop %rax\n"
        "    add $0x7f, %al\n"
        "    sahf\n"
        "    pop %rax\n"
        "    ret\n"
        ".size profdev_cov_record,.-profdev_cov_record\n");

/* Every thread's records so far count as reported (after a report that
 * did not end the image, and in a forked child: what the parent ran). */
static void rebase_targets(void) {
    int na = __atomic_load_n(&narrays, __ATOMIC_ACQUIRE);
    if (na > MAXTHR) na = MAXTHR;
    for (int k = 0; k < na; k++) {
        uint64_t *a = __atomic_load_n(&arrays[k], __ATOMIC_ACQUIRE);
        if (!a) continue;
        struct ttab *t = (struct ttab *)__atomic_load_n(&a[SLOT_TABLE], __ATOMIC_ACQUIRE);
        if (!t) continue;
        uint64_t n = __atomic_load_n(&t->n, __ATOMIC_ACQUIRE);
        for (uint64_t i = 0; i < n; i++) t->r[i].base = t->r[i].count;
    }
}

static void *big_alloc(uint64_t bytes) {
    void *p = (void *)raw6(SYS_mmap, 0, (long)bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((unsigned long)p > -4096UL) return NULL;
    /* In huge pages where the kernel has them: cc1's patches (29 MB,
     * 1,350,000 of them in hit mode) were 7,000 faults, each zeroing a
     * page, a third of reading them. */
    if (bytes >= (4u << 20)) raw6(SYS_madvise, (long)p, (long)bytes, MADV_HUGEPAGE, 0, 0, 0);
    return p;
}

static void big_free(void *p, uint64_t bytes) {
    if (p) raw6(SYS_munmap, (long)p, (long)bytes, 0, 0, 0, 0);
}

/* The modules mapped now, for a target's (path, link-time address). */
struct loaded {
    uint64_t lo, hi, bias;
    char path[512];
};
struct loadeds {
    struct loaded *v;
    int n, cap;
};

static int list_loaded(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct loadeds *l = data;
    if (l->n >= l->cap) return 0;
    struct loaded *x = &l->v[l->n];
    x->lo = ~0ull;
    x->hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        if (a < x->lo) x->lo = a;
        if (b > x->hi) x->hi = b;
    }
    if (!x->hi) return 0;
    x->bias = info->dlpi_addr;
    const char *name = info->dlpi_name;
    x->path[0] = 0;
    if (!name || !*name) {
        ssize_t r = readlink("/proc/self/exe", x->path, sizeof x->path - 1);
        x->path[r > 0 ? r : 0] = 0;
    } else if (strlen(name) < sizeof x->path) {
        strcpy(x->path, name);
    }
    /* Only a file-backed module by a plain absolute path names a target. */
    if (x->path[0] != '/' || strchr(x->path, '\n')) x->path[0] = 0;
    l->n++;
    return 0;
}

/* The call-target lines of a report: `I <module id> <block> <count>
 * <link-time target> <path>` for a target in a module mapped from a file,
 * `I <module id> <block> <count> <run-time target>` for one outside every
 * such module, then `ilost <n>` (records lost: a site reached again
 * inside the recorder, from a signal handler, or a table full). */
static void report_targets(struct sigsafe_out *o) {
    struct loadeds l = {.cap = 1024};
    int na = __atomic_load_n(&narrays, __ATOMIC_ACQUIRE);
    if (na > MAXTHR) na = MAXTHR;
    for (int k = 0; k < na; k++) {
        uint64_t *a = __atomic_load_n(&arrays[k], __ATOMIC_ACQUIRE);
        if (!a) continue;
        struct ttab *t = (struct ttab *)__atomic_load_n(&a[SLOT_TABLE], __ATOMIC_ACQUIRE);
        if (!t) continue;
        uint64_t n = __atomic_load_n(&t->n, __ATOMIC_ACQUIRE);
        for (uint64_t i = 0; i < n; i++) {
            struct trec *r = &t->r[i];
            uint64_t c = r->count - r->base;
            if (!c) continue;
            uint64_t idx = r->key / 8;
            int m = 0;
            while (m < nmods && !(idx >= mods[m].cb && idx < mods[m].cb + mods[m].n)) m++;
            if (m == nmods) continue;
            if (!l.v) {
                l.v = big_alloc(sizeof(struct loaded) * l.cap);
                if (!l.v) return;
                dl_iterate_phdr(list_loaded, &l);
            }
            int j = 0;
            while (j < l.n && !(r->target >= l.v[j].lo && r->target < l.v[j].hi && l.v[j].path[0])) j++;
            sigsafe_puts(o, "I ");
            sigsafe_putu(o, mods[m].id, 10);
            sigsafe_puts(o, " ");
            sigsafe_putu(o, idx - mods[m].cb, 16);
            sigsafe_puts(o, " ");
            sigsafe_putu(o, c, 16);
            sigsafe_puts(o, " ");
            if (j < l.n) {
                sigsafe_putu(o, r->target - l.v[j].bias, 16);
                sigsafe_puts(o, " ");
                sigsafe_puts(o, l.v[j].path);
            } else {
                sigsafe_putu(o, r->target, 16);
            }
            sigsafe_puts(o, "\n");
        }
    }
    uint64_t lost;
    totals_at(&lost, SLOT_LOST, 1);
    if (lost) {
        sigsafe_puts(o, "ilost ");
        sigsafe_putu(o, lost, 10);
        sigsafe_puts(o, "\n");
    }
    big_free(l.v, sizeof(struct loaded) * l.cap);
}

/* Write this process image's counts, once. */
static void report(void) {
    if (!active || __atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL)) return;
    /* The totals a piece at a time, into a buffer of its own (cc1's
     * 1,350,000 counters had been 11 MB of fresh memory per report). */
    enum { PIECE = 4096 };
    static uint64_t tot[PIECE];
    char path[4200];
    int fd = -1;
    for (int seq = 0; seq < 10000 && fd < 0; seq++) {
        snprintf(path, sizeof path, "%s/cov.%d.%d", out_dir, (int)getpid(), seq);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd >= 0) {
        static char buf[65536];
        struct sigsafe_out o = SIGSAFE_OUT(fd, buf);
        sigsafe_puts(&o, "profdev-coverage 1\npid ");
        sigsafe_puti(&o, getpid());
        sigsafe_puts(&o, "\ntraps ");
        sigsafe_putu(&o, traps, 10);
        sigsafe_puts(&o, "\nonce ");
        sigsafe_putu(&o, onces, 10);
        sigsafe_puts(&o, "\n");
        for (int m = 0; m < nmods; m++) {
            sigsafe_puts(&o, "M ");
            sigsafe_putu(&o, mods[m].id, 10);
            sigsafe_puts(&o, " ");
            sigsafe_putu(&o, mods[m].cb, 10);
            sigsafe_puts(&o, " ");
            sigsafe_putu(&o, mods[m].n, 10);
            sigsafe_puts(&o, "\n");
            for (uint64_t i = 0; i < mods[m].n; i++) {
                uint64_t k = i % PIECE;
                if (!k) totals_at(tot, mods[m].cb + i, mods[m].n - i < PIECE ? mods[m].n - i : PIECE);
                uint64_t c = tot[k];
                if (!c) continue;
                sigsafe_putu(&o, i, 16);
                sigsafe_puts(&o, " ");
                sigsafe_putu(&o, c, 16);
                sigsafe_puts(&o, "\n");
            }
        }
        report_targets(&o);
        sigsafe_puts(&o, "end\n");
        sigsafe_flush(&o);
        close(fd);
    }
}

/* After a report that did not end the image (exec failed): count on
 * from here. */
static void rebase(void) {
    uint64_t n = next_counter;
    uint64_t *t = big_alloc(n * 8 + 8);
    if (!t) return;
    totals(t, n);
    for (uint64_t i = 0; i < n && i < base_n; i++) t[i] += base[i];
    big_free(base, base_n * 8 + 8);
    base = t;
    base_n = n;
    rebase_targets();
    __atomic_store_n(&reported, 0, __ATOMIC_RELEASE);
}

/* ---- SIGTRAP: blocks counted through int3 ---- */

void profdev_cov_restore(void);
__asm__(".text\n"
        ".type profdev_cov_restore,@function\n"
        "profdev_cov_restore:\n"
        "    mov $15, %eax\n"
        "    syscall\n"
        ".size profdev_cov_restore,.-profdev_cov_restore\n");

/* This process's /proc/self/mem, through which once() writes code:
 * opened at setup (and anew in a forked child: a descriptor inherited
 * across a fork writes the parent's memory), kept at a high number, and
 * checked before each use (device, inode, pid), since the program may
 * have closed it and opened a file of its own under that number. */
static uint64_t mem_dev, mem_ino;
static int mem_pid, mem_lock;

static int mem_same(int fd, uint64_t dev, uint64_t ino) {
    struct stat st;
    return fd >= 0 && !raw6(SYS_fstat, fd, (long)&st, 0, 0, 0, 0) && st.st_dev == dev && st.st_ino == ino;
}

/* Async-signal-safe; -1 when another thread is at it (the caller falls
 * back to mprotect). */
static int mem_reopen(void) {
    if (__atomic_exchange_n(&mem_lock, 1, __ATOMIC_ACQUIRE)) return -1;
    int old = __atomic_load_n(&mem_fd, __ATOMIC_ACQUIRE);
    if (old >= 0 && mem_same(old, mem_dev, mem_ino)) raw6(SYS_close, old, 0, 0, 0, 0, 0);
    __atomic_store_n(&mem_fd, -1, __ATOMIC_RELEASE);
    int fd = (int)raw6(SYS_openat, AT_FDCWD, (long)"/proc/self/mem", O_RDWR | O_CLOEXEC, 0, 0, 0);
    if (fd >= 0) {
        int hi = (int)raw6(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 1000, 0, 0, 0);
        if (hi >= 0) {
            raw6(SYS_close, fd, 0, 0, 0, 0, 0);
            fd = hi;
        }
        struct stat st;
        if (raw6(SYS_fstat, fd, (long)&st, 0, 0, 0, 0)) {
            raw6(SYS_close, fd, 0, 0, 0, 0, 0);
            fd = -1;
        } else {
            mem_dev = st.st_dev;
            mem_ino = st.st_ino;
            mem_pid = (int)raw6(SYS_getpid, 0, 0, 0, 0, 0, 0);
            __atomic_store_n(&mem_fd, fd, __ATOMIC_RELEASE);
        }
    }
    __atomic_store_n(&mem_lock, 0, __ATOMIC_RELEASE);
    return fd;
}

/* ---- the launch window: one-shot probes put back by a store ----
 *
 * A one-shot probe's first hit costs a signal (about 3.3 us on the
 * 2-vCPU VM) and the write that puts its byte back through
 * /proc/self/mem, with the checks that the descriptor is still ours:
 * 2.5 us more (bench/trap_cost.c). Most probes are hit at start-up
 * (`python3 -c pass`: 25,800), or while a program reaches new code
 * (a compiler's passes: `cc -O2 -c` of the bench's gen.c hits 83,600,
 * over its whole run). So at a launch (the constructor's cover_all, not
 * an attach nor a later dlopen) the runs of pages that hold one-shot
 * probes are left writable and executable after their patching, for a
 * window of PROFDEV_COV_WINDOW_MS milliseconds (WX_DEFAULT_MS; 0: no
 * window) from the end of the constructor's patching, which each hit
 * that reads the clock moves on (of any 16 hits that store, one does):
 * the window stays open while the program hits new probes, 16 in each
 * such span at least. A hit in the window stores the byte. The window
 * ends, and every run is made R-X again: at a hit past it; at any call
 * the runtime interposes past it (dlopen, fork, pthread_create); and at
 * once, before the program's own mprotect, mmap
 * (MAP_FIXED), munmap or mremap of a page in a run (so such a call
 * never finds the pages other than the program left them). A process
 * that hits no probe and makes none of those calls after the window
 * keeps its pages writable until it exits. A store and the end of the
 * window cannot cross: a hit counts itself in (wx_inflight) before it
 * tests wx_open again, and the end clears wx_open before it waits (a
 * bounded number of yields) for no hit to be in; a hit that finds the
 * window ending writes through /proc/self/mem as outside it. Not
 * covered: a program changing its own code pages by a raw system call
 * (then a hit's store could fault). */
#define WX_DEFAULT_MS 1000
#define WX_RUNS 4096
static struct {
    uint64_t lo, hi;
} wx_run[WX_RUNS];
static int wx_nrun;     /* runs left writable */
static int wx_launch;   /* set while the constructor patches: apply() keeps runs writable */
static int wx_open;     /* hits store their byte */
static int wx_inflight; /* hits between their test of wx_open and their store */
static int wx_lock;     /* one wx_end at a time */
static uint64_t wx_until; /* the window's end, CLOCK_MONOTONIC nanoseconds */

static uint64_t mono_ns(void) {
    struct timespec t;
    if (raw6(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&t, 0, 0, 0, 0)) return ~0ull;
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* End the window (async-signal-safe): no hit stores any more, and every
 * run is R-X again once no hit is storing. A run left writable by a
 * failed try is made R-X by the next call. */
static void wx_end(void) {
    if (!__atomic_load_n(&wx_nrun, __ATOMIC_ACQUIRE) || __atomic_load_n(&wx_launch, __ATOMIC_ACQUIRE))
        return;
    if (__atomic_exchange_n(&wx_lock, 1, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&wx_open, 0, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 10000 && __atomic_load_n(&wx_inflight, __ATOMIC_SEQ_CST); i++)
        raw6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
    if (!__atomic_load_n(&wx_inflight, __ATOMIC_SEQ_CST)) {
        int n = __atomic_load_n(&wx_nrun, __ATOMIC_ACQUIRE);
        for (int i = 0; i < n; i++) {
            /* lo before hi (wx_touch drops a run hi first). */
            uint64_t lo = __atomic_load_n(&wx_run[i].lo, __ATOMIC_ACQUIRE);
            uint64_t hi = __atomic_load_n(&wx_run[i].hi, __ATOMIC_ACQUIRE);
            raw6(SYS_mprotect, (long)lo, (long)(hi - lo), PROT_READ | PROT_EXEC, 0, 0, 0);
        }
        __atomic_store_n(&wx_nrun, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&wx_lock, 0, __ATOMIC_RELEASE);
}

static uint64_t wx_span; /* PROFDEV_COV_WINDOW_MS in nanoseconds */

/* The window is past its time: end it. At a hit (hit), a window still
 * open is moved on. */
static void wx_check(int hit) {
    if (!__atomic_load_n(&wx_nrun, __ATOMIC_ACQUIRE)) return;
    uint64_t now = mono_ns();
    if (now >= __atomic_load_n(&wx_until, __ATOMIC_RELAXED))
        wx_end();
    else if (hit)
        __atomic_store_n(&wx_until, now + wx_span, __ATOMIC_RELAXED);
}

/* Before the program changes the mapping of [a, a+len): if that touches
 * a run, the window ends first. Should it not (a hit storing that cannot
 * go on: a handler's, on this thread), the runs touched are dropped, so
 * that the end never changes what the program maps there next (its
 * high bound first: a run read half dropped has hi below lo, which
 * mprotect refuses whole). */
static void wx_touch(const void *a, size_t len) {
    int n = __atomic_load_n(&wx_nrun, __ATOMIC_ACQUIRE);
    uint64_t lo = (uint64_t)(uintptr_t)a, hi = lo + len;
    for (int i = 0; i < n; i++)
        if (lo < wx_run[i].hi && hi > wx_run[i].lo) {
            wx_end();
            n = __atomic_load_n(&wx_nrun, __ATOMIC_ACQUIRE);
            for (int k = 0; k < n; k++)
                if (lo < wx_run[k].hi && hi > wx_run[k].lo) {
                    __atomic_store_n(&wx_run[k].hi, 0, __ATOMIC_RELEASE);
                    __atomic_store_n(&wx_run[k].lo, 0, __ATOMIC_RELEASE);
                }
            return;
        }
}

/* A one-shot probe's first hit (any thread; async-signal-safe): record
 * the block as run, then put the original byte back, so the block runs
 * natively from now on. One byte is written: no other thread can see a
 * torn instruction (it sees the breakpoint, and comes here too, or the
 * original byte). The write goes through /proc/self/mem, which writes
 * code pages without making them writable (no mprotect, no window in
 * which the page is writable or, for another thread, not executable);
 * it is checked by reading the byte back (a descriptor inherited across
 * a fork writes the parent's memory: reopened). If the kernel refuses
 * that (proc_mem.force_override=never, a seccomp filter), the page is
 * made writable and executable, and left so. */
static void once(struct patch *t, struct mod *m) {
    uint64_t n_once = __atomic_fetch_add(&onces, 1, __ATOMIC_RELAXED);
    uint64_t *a0 = __atomic_load_n(&arrays[0], __ATOMIC_ACQUIRE);
    if (a0) ((volatile uint8_t *)a0)[8 * (m->cb + t->entry)] = 1;
    volatile uint8_t *p = (volatile uint8_t *)(uintptr_t)t->addr;
    uint8_t o = (uint8_t)t->orig;
    if (*p != o && m->wx && __atomic_load_n(&wx_open, __ATOMIC_ACQUIRE)) {
        /* In the launch window: its page is writable. */
        __atomic_fetch_add(&wx_inflight, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&wx_open, __ATOMIC_SEQ_CST)) *p = o;
        __atomic_fetch_sub(&wx_inflight, 1, __ATOMIC_SEQ_CST);
        if (!(n_once & 15)) wx_check(1);
    }
    if (*p != o) {
        int fd = __atomic_load_n(&mem_fd, __ATOMIC_ACQUIRE);
        uint64_t dev = mem_dev, ino = mem_ino;
        if (fd < 0 || mem_pid != (int)raw6(SYS_getpid, 0, 0, 0, 0, 0, 0) || !mem_same(fd, dev, ino))
            fd = mem_reopen();
        if (fd >= 0) raw6(SYS_pwrite64, fd, (long)&o, 1, (long)t->addr, 0, 0);
    }
    if (*p != o) {
        uint64_t pg = t->addr & ~4095ull;
        if (!raw6(SYS_mprotect, (long)pg, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0)) *p = o;
    }
    if (*p != o) {
        static const char msg[] = "profdev cprof: cannot remove a probe from the program's code "
                                  "(writing /proc/self/mem and mprotect were refused); run with -f\n";
        raw6(SYS_write, 2, (long)msg, sizeof msg - 1, 0, 0, 0);
        report();
        raw6(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    }
}

static void on_trap(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    uint64_t pc = uc->uc_mcontext.gregs[REG_RIP] - 1;
    int nm = __atomic_load_n(&nmods, __ATOMIC_ACQUIRE);
    for (int m = 0; m < nm; m++) {
        if (pc < mods[m].lo || pc >= mods[m].hi) continue;
        uint64_t lo = 0, hi = mods[m].ntraps;
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (mods[m].traps[mid].addr < pc) lo = mid + 1;
            else hi = mid;
        }
        if (lo < mods[m].ntraps && mods[m].traps[lo].addr == pc && mods[m].traps[lo].kind == 6) {
            /* Only the breakpoint itself (a SIGTRAP sent by kill or a
             * single step has another code, and pc may hold a restored
             * probe's byte). */
            if (si->si_code != SI_KERNEL) break;
            once(&mods[m].traps[lo], &mods[m]);
            uc->uc_mcontext.gregs[REG_RIP] = pc;
            return;
        }
        if (lo < mods[m].ntraps && mods[m].traps[lo].addr == pc) {
            __atomic_fetch_add(&traps, 1, __ATOMIC_RELAXED);
            uc->uc_mcontext.gregs[REG_RIP] = mods[m].traps[lo].entry;
            return;
        }
    }
    /* Not ours. */
    if (old_trap.sa_flags & SA_SIGINFO) {
        if (old_trap.sa_sigaction) old_trap.sa_sigaction(sig, si, ctx);
        return;
    }
    if (old_trap.sa_handler != SIG_DFL && old_trap.sa_handler != SIG_IGN) {
        old_trap.sa_handler(sig);
        return;
    }
    report();
    signal(SIGTRAP, SIG_DFL);
    raise(SIGTRAP);
}

static void on_fatal(int sig) {
    report();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- planning and patching ---- */

static int read_full(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= r;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        /* A socket: no SIGPIPE if profdev went away. */
        ssize_t r = send(fd, c, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= r;
    }
    return 0;
}

static int read_line(int fd, char *buf, size_t cap) {
    size_t i = 0;
    while (i + 1 < cap) {
        if (read_full(fd, buf + i, 1)) return -1;
        if (buf[i] == '\n') break;
        i++;
    }
    buf[i] = 0;
    return 0;
}

/* A free area of `size` bytes whose every byte is within 2 GiB - 16 MiB
 * of every byte of [lo, hi). */
static uint64_t place_area(uint64_t lo, uint64_t hi, uint64_t size) {
    const uint64_t reach = (1ull << 31) - (16ull << 20);
    const uint64_t step = 1ull << 20;
    if (hi - lo + size > reach) return 0;
    /* First 1 GiB below the module, else 1 GiB above it: far from the
     * neighbours (other libraries, the heap, the counter arrays) whose
     * places vary from run to run, so that the next run of the same
     * program finds the same distance free and is served the encoding
     * kept for it (see the on-disk cache) instead of a new one. */
    const uint64_t far = 1ull << 30;
    for (int dir = 0; dir < 2; dir++) {
        uint64_t a = dir == 0 ? (lo > far + size ? (lo - far - size) & ~0xffffull : 0)
                              : (hi + far + 0xffff) & ~0xffffull;
        if (!a || a + size > lo + reach || hi > a + reach || a + size < a) continue;
        void *p = (void *)raw6(SYS_mmap, (long)a, (long)size, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if ((unsigned long)p > -4096UL) continue;
        if ((uint64_t)p == a) return a;
        raw6(SYS_munmap, (long)p, (long)size, 0, 0, 0, 0);
    }
    /* Then near it: below first, then above. */
    for (int dir = 0; dir < 2; dir++) {
        for (uint64_t k = 0; k < 1024; k++) {
            uint64_t a;
            if (dir == 0) {
                uint64_t d = size + (k + 1) * step;
                if (lo < d + (1ull << 20)) break;
                a = (lo - d) & ~0xffffull;
            } else {
                a = ((hi + 0xffff) & ~0xffffull) + k * step;
            }
            if (a + size > lo + reach || hi > a + reach) break;
            void *p = (void *)raw6(SYS_mmap, (long)a, (long)size, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if ((unsigned long)p > -4096UL) continue;
            if ((uint64_t)p == a) return a;
            raw6(SYS_munmap, (long)p, (long)size, 0, 0, 0, 0);
        }
    }
    return 0;
}

/* Avoid the library's memcpy/memset while the code may be half patched. */
static void poke(uint8_t *dst, const uint8_t *src, uint32_t n) {
    volatile uint8_t *d = dst;
    for (uint32_t i = 0; i < n; i++) d[i] = src[i];
}

/* Write the patches; `stopped` holds PCs of stopped threads (attach):
 * a patch whose bytes hold one is skipped. Returns patches skipped.
 *
 * The pages are made writable for the time of the patching (raw system
 * calls) run by run: a run is patches whose pages touch, so every page of
 * a run holds patched code and is given back R-X after. A module's code
 * may have holes between its executable segments (node's has unmapped
 * pages and read-only data between them): no mprotect spans one. A run
 * that cannot be made writable is skipped whole (its blocks uncounted, not
 * "never run"). */
static uint64_t apply_run(struct patch *ps, uint64_t np, const uint64_t *stopped, uint64_t nstopped);

static uint64_t apply(struct patch *ps, uint64_t np, const uint64_t *stopped, uint64_t nstopped,
                      int *wx) {
    uint64_t skipped = 0;
    *wx = wx_launch && !nstopped;
    for (uint64_t i = 0; i < np;) {
        uint64_t lo = ps[i].addr & ~4095ull;
        uint64_t hi = (ps[i].addr + patch_len(&ps[i]) + 4095) & ~4095ull;
        uint64_t j = i + 1;
        while (j < np && (ps[j].addr & ~4095ull) >= lo && (ps[j].addr & ~4095ull) <= hi) {
            uint64_t e = (ps[j].addr + patch_len(&ps[j]) + 4095) & ~4095ull;
            if (e > hi) hi = e;
            j++;
        }
        if (raw6(SYS_mprotect, (long)lo, (long)(hi - lo), PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0)) {
            for (uint64_t k = i; k < j; k++) ps[k].kind = 0;
            skipped += j - i;
            i = j;
            continue;
        }
        skipped += apply_run(ps + i, j - i, stopped, nstopped);
        int once = 0;
        for (uint64_t k = i; k < j && !once; k++) once = ps[k].kind == 6;
        if (once && *wx && wx_nrun < WX_RUNS) {
            /* The launch window: left writable (see there). */
            wx_run[wx_nrun].lo = lo;
            wx_run[wx_nrun].hi = hi;
            __atomic_store_n(&wx_nrun, wx_nrun + 1, __ATOMIC_RELEASE);
        } else {
            if (once) *wx = 0;
            raw6(SYS_mprotect, (long)lo, (long)(hi - lo), PROT_READ | PROT_EXEC, 0, 0, 0);
        }
        i = j;
    }
    return skipped;
}

/* Write the patches of one run, its pages writable. Returns patches
 * skipped. */
static uint64_t apply_run(struct patch *ps, uint64_t np, const uint64_t *stopped, uint64_t nstopped) {
    uint64_t skipped = 0;
    for (uint64_t i = 0; i < np; i++) {
        struct patch *p = &ps[i];
        if (p->kind == 6 && !nstopped) {
            /* A one-shot probe, nothing stopped in it (a launch): its
             * byte (cc1's 1,350,000 in hit mode). */
            *(volatile uint8_t *)(uintptr_t)p->addr = 0xcc;
            continue;
        }
        int hit = 0;
        for (uint64_t s = 0; s < nstopped; s++)
            if (stopped[s] > p->addr && stopped[s] < p->addr + patch_len(p)) hit = 1;
        if (hit) {
            skipped++;
            p->kind = 0;
            continue;
        }
        uint8_t b[64];
        uint32_t n = patch_len(p) > sizeof b ? sizeof b : patch_len(p);
        for (uint32_t k = 0; k < n; k++) b[k] = 0xcc;
        int32_t rel;
        switch (p->kind) {
        case 1:
            rel = (int32_t)(p->entry - (p->addr + 5));
            b[0] = 0xe9;
            memcpy(b + 1, &rel, 4);
            break;
        case 2:
        case 6:
            break;
        case 3:
            rel = (int32_t)(p->entry - (p->addr + 5));
            b[0] = 0xe8;
            memcpy(b + 1, &rel, 4);
            break;
        case 5:
            b[0] = 0xeb;
            b[1] = (uint8_t)(int8_t)(p->entry - (p->addr + 2));
            break;
        case 4:
            rel = (int32_t)(p->entry - (p->addr + 6));
            b[0] = 0x3e;
            b[1] = 0xe8;
            memcpy(b + 2, &rel, 4);
            break;
        default:
            continue;
        }
        if (p->kind == 1 && n > 5) {
            /* The jump's 4 tail bytes first, its opcode last: a thread
             * running here (attach) sees the old first byte or the jump. */
            poke((uint8_t *)p->addr + 1, b + 1, n - 1);
            poke((uint8_t *)p->addr, b, 1);
        } else {
            poke((uint8_t *)p->addr, b, n);
        }
    }
    return skipped;
}

/* Open a module's conversation: connect and send its MOD line (the
 * server starts finding its plan and encoding at once). The descriptor;
 * -2 when the module has no file (the vDSO: nothing to cover), -1 on
 * failure. */
static int cover_open(const char *path, uint64_t bias, uint64_t lo, uint64_t hi) {
    struct stat st;
    if (stat(path, &st)) return -2;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock_path, sizeof sa.sun_path - 1);
    char line[4400];
    int k = snprintf(line, sizeof line, "MOD %d %lu %lu %lx %lx %lx %s\n", (int)getpid(),
                     (unsigned long)st.st_dev, (unsigned long)st.st_ino, (unsigned long)bias,
                     (unsigned long)lo, (unsigned long)hi, path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) || k >= (int)sizeof line || write_full(fd, line, k)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Go on with the conversation cover_open began (fd; closed here): the
 * module's plan applied. Returns 0 when done or skipped by profdev, -1 on
 * failure, -3 when the server closed the conversation unanswered (one
 * opened ahead of its turn, beyond the server's bound on another user's
 * connections). Holds `lock`. */
static int cover(int fd, uint64_t bias, uint64_t lo, uint64_t hi, const uint64_t *stopped,
                 uint64_t nstopped) {
    if (fd == -2) return 0;
    if (fd < 0) return -1;
    int rc = -1;
    char line[4400];
    uint8_t *area = NULL;
    uint64_t size = 0;
    struct patch *ps = NULL;
    uint64_t np = 0;
    if (nmods >= MAXMOD) goto out;
    if (read_line(fd, line, sizeof line)) {
        rc = -3;
        goto out;
    }
    unsigned long sz, n;
    if (!strcmp(line, "SKIP")) {
        rc = 0;
        goto out;
    }
    unsigned long off;
    int nf = sscanf(line, "SIZE %lx %lx %lx", &sz, &n, &off);
    if (nf < 2) goto out;
    if (next_counter + n > CAP) goto out;
    size = sz;
    uint64_t a = 0;
    if (nf == 3) {
        /* Where an encoding exists already: profdev copies it instead of
         * encoding anew. Only where it is within reach of the module. */
        const uint64_t reach = (1ull << 31) - (16ull << 20);
        uint64_t want = bias + off;
        if (!(want & 0xfff) && want + size > want && hi - lo + size <= reach && want + size <= lo + reach &&
            hi <= want + reach) {
            void *p = (void *)raw6(SYS_mmap, (long)want, (long)size, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if ((uint64_t)p == want)
                a = want;
            else if ((unsigned long)p <= -4096UL)
                raw6(SYS_munmap, (long)p, (long)size, 0, 0, 0, 0);
        }
    }
    if (!a) a = place_area(lo, hi, size);
    if (!a) goto out;
    area = (uint8_t *)a;
    int k = snprintf(line, sizeof line, "AT %lx %lx\n", (unsigned long)a, (unsigned long)next_counter);
    if (write_full(fd, line, k) || read_line(fd, line, sizeof line)) goto out;
    unsigned long len, id;
    if (sscanf(line, "TEXT %lx %lx %lx", &len, &np, &id) != 3 || len > size) goto out;
    if (np > (1ull << 40) / sizeof *ps) goto out;
    if (read_full(fd, area, len)) goto out;
    ps = big_alloc(np * sizeof *ps + 8);
    if (!ps) goto out;
    /* 12 bytes a patch, relative to this load (the server's
     * encode/wire.rs), read into the array's upper half and widened in
     * place from the front: record i is read before patch i, which ends
     * at or below record i's start, is written. */
    uint8_t *wire = (uint8_t *)ps + np * (sizeof *ps - WIRE);
    uint64_t nt = 0;
    if (read_full(fd, wire, np * WIRE)) goto out;
    for (uint64_t i = 0; i < np; i++) {
        uint32_t a32, e32;
        uint16_t kind, plen;
        memcpy(&a32, wire + i * WIRE, 4);
        memcpy(&e32, wire + i * WIRE + 4, 4);
        memcpy(&kind, wire + i * WIRE + 8, 2);
        memcpy(&plen, wire + i * WIRE + 10, 2);
        uint64_t entry = kind == 5 ? bias + e32 : kind == 6 ? e32 : a + e32;
        ps[i] = (struct patch){bias + a32, entry, kind, {plen}};
        if (kind == 6 && (ps[i].addr < lo || ps[i].addr >= hi || entry >= n)) goto out;
        if (is_trap(&ps[i])) {
            if (plen != 1) goto out;
            /* The byte a one-shot probe replaces, read before it does. */
            ps[i].orig = kind == 6 ? *(volatile uint8_t *)(uintptr_t)ps[i].addr : 0;
            nt++;
        }
    }
    if (raw6(SYS_mprotect, (long)area, (long)size, PROT_READ | PROT_EXEC, 0, 0, 0)) goto out;
    /* Every patch a breakpoint (a module in hit mode: cc1's 1,350,000):
     * the patches are the table, and kept. */
    struct patch *traps = ps;
    if (nt != np) {
        traps = big_alloc(nt * sizeof *traps + 8);
        if (!traps) goto out;
        nt = 0;
        for (uint64_t i = 0; i < np; i++)
            if (is_trap(&ps[i])) traps[nt++] = ps[i];
    }
    struct mod *m = &mods[nmods];
    m->lo = lo;
    m->hi = hi;
    m->cb = next_counter;
    m->n = n;
    m->id = id;
    m->traps = traps;
    m->ntraps = nt;
    next_counter += n;
    __atomic_store_n(&nmods, nmods + 1, __ATOMIC_RELEASE);
    if (getenv("PROFDEV_COV_DEBUG"))
        dprintf(2, "profdev-cov %d: module %lu bias %lx lo %lx hi %lx area %lx size %lx len %lx patches %lu\n",
                (int)getpid(), id, (unsigned long)bias, (unsigned long)lo, (unsigned long)hi,
                (unsigned long)a, (unsigned long)size, len, np);
    uint64_t skipped = nstopped ? hold_hops(ps, np, stopped, nstopped) : 0;
    int wx;
    skipped += apply(ps, np, stopped, nstopped, &wx);
    __atomic_store_n(&m->wx, wx, __ATOMIC_RELEASE);
    /* Tell profdev which patches were left out (attach). */
    k = snprintf(line, sizeof line, "DONE %lx\n", (unsigned long)skipped);
    write_full(fd, line, k);
    if (skipped) {
        for (uint64_t i = 0; i < np; i++) {
            if (ps[i].kind) continue;
            k = snprintf(line, sizeof line, "S %lx\n", (unsigned long)ps[i].addr);
            write_full(fd, line, k);
        }
    }
    area = NULL; /* kept */
    if (traps == ps) ps = NULL; /* kept: the trap table */
    rc = 0;
out:
    if (area) big_free(area, size);
    big_free(ps, np * sizeof *ps + 8);
    close(fd);
    return rc;
}

struct found {
    char path[4096];
    uint64_t bias, lo, hi;
};
struct finds {
    struct found *v;
    int n, cap;
};

static int is_covered(uint64_t lo) {
    for (int m = 0; m < nmods; m++)
        if (mods[m].lo == lo) return 1;
    return 0;
}

static int collect(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct finds *f = data;
    uint64_t lo = ~0ull, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    if (hi == 0 || f->n >= f->cap) return 0;
    uint64_t self = (uint64_t)(uintptr_t)&collect;
    if (self >= lo && self < hi) return 0; /* the runtime itself */
    if (is_covered(lo)) return 0;
    struct found *x = &f->v[f->n];
    const char *name = info->dlpi_name;
    if (!name || !*name) {
        ssize_t r = readlink("/proc/self/exe", x->path, sizeof x->path - 1);
        if (r <= 0) return 0;
        x->path[r] = 0;
    } else {
        snprintf(x->path, sizeof x->path, "%s", name);
    }
    x->bias = info->dlpi_addr;
    x->lo = lo & ~4095ull;
    x->hi = hi;
    f->n++;
    return 0;
}

/* Cover every module mapped and not yet covered. */
static void cover_all(const uint64_t *stopped, uint64_t nstopped) {
    struct finds f = {.cap = 1024};
    f.v = big_alloc(sizeof(struct found) * f.cap);
    if (!f.v) return;
    pthread_mutex_lock(&lock);
    dl_iterate_phdr(collect, &f);
    /* Up to AHEAD conversations are opened before their turn: the server
     * finds the next modules' plans (on threads of its own) while this
     * one's patches are written. (Not more: another user's processes
     * have a bounded number of connections, and each takes a descriptor
     * of a process that may be near its limit: one refused, or not
     * opened, is asked again in its turn.) */
    enum { AHEAD = 8 };
    int ring[AHEAD];
    int opened = 0;
    for (int i = 0; i < f.n; i++) {
        for (; opened < f.n && opened < i + AHEAD; opened++)
            ring[opened % AHEAD] = cover_open(f.v[opened].path, f.v[opened].bias, f.v[opened].lo,
                                              f.v[opened].hi);
        struct found *x = &f.v[i];
        int fd = ring[i % AHEAD];
        if (cover(fd, x->bias, x->lo, x->hi, stopped, nstopped) == -3 || fd == -1)
            cover(cover_open(x->path, x->bias, x->lo, x->hi), x->bias, x->lo, x->hi, stopped, nstopped);
    }
    pthread_mutex_unlock(&lock);
    big_free(f.v, sizeof(struct found) * f.cap);
}

/* ---- threads, fork, exec, exit ---- */

static void prepare(void) {
    if (!active) return;
    wx_check(0);
    pending_n = next_counter;
    pending = big_alloc(pending_n * 8 + 8);
    if (pending) {
        totals(pending, pending_n);
        for (uint64_t i = 0; i < pending_n && i < base_n; i++) pending[i] += base[i];
    }
}
static void parent(void) {
    big_free(pending, pending_n * 8 + 8);
    pending = NULL;
}
static void child(void) {
    if (!active) return;
    mem_lock = 0;
    wx_inflight = 0; /* only this thread goes on */
    wx_lock = 0;
    mem_reopen();
    /* Other threads' arrays are dead copies, in the base and the totals
     * alike, so they cancel. */
    big_free(base, base_n * 8 + 8);
    base = pending;
    base_n = pending ? pending_n : 0;
    pending = NULL;
    rebase_targets();
    reported = 0;
}

struct start {
    void *(*fn)(void *);
    void *arg;
    uint64_t *arr;
};

static void *thread_start(void *p) {
    struct start s = *(struct start *)p;
    free(p);
    if (s.arr) set_gs(s.arr);
    return s.fn(s.arg);
}

API int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) real = dlsym(RTLD_NEXT, "pthread_create");
    if (!active) return real(t, a, fn, arg);
    wx_check(0);
    struct start *s = malloc(sizeof *s);
    if (!s) return real(t, a, fn, arg);
    s->fn = fn;
    s->arg = arg;
    s->arr = new_array();
    int r = real(t, a, thread_start, s);
    if (r) free(s);
    return r;
}

API void *dlopen(const char *file, int mode) {
    static void *(*real)(const char *, int);
    if (!real) real = dlsym(RTLD_NEXT, "dlopen");
    void *h = real(file, mode);
    if (h && active) {
        wx_check(0);
        cover_all(NULL, 0);
    }
    return h;
}

API void _exit(int status) {
    report();
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

API void _Exit(int status) { _exit(status); }

extern char **environ;

/* An environment holding our variables (a program may have dropped them). */
static char **with_ours(char *const envp[]) {
    static const char *keys[] = {"LD_PRELOAD=", "PROFDEV_COV_SOCK=", "PROFDEV_COV_OUT="};
    const char *mine[3] = {0};
    for (char **e = environ; e && *e; e++)
        for (int k = 0; k < 3; k++)
            if (!strncmp(*e, keys[k], strlen(keys[k]))) mine[k] = *e;
    int n = 0, have[3] = {0};
    for (; envp && envp[n]; n++)
        for (int k = 0; k < 3; k++)
            if (!strncmp(envp[n], keys[k], strlen(keys[k]))) have[k] = 1;
    char **v = malloc((n + 4) * sizeof *v);
    if (!v) return (char **)envp;
    int j = 0;
    for (int i = 0; i < n; i++) v[j++] = envp[i];
    for (int k = 0; k < 3; k++)
        if (!have[k] && mine[k]) v[j++] = (char *)mine[k];
    v[j] = NULL;
    return v;
}

#define REAL(name) \
    static __typeof__(name) *real_##name; \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

/* The program's own changes to its mappings: where one touches the
 * launch window's pages, the window ends first (see there). */
API int mprotect(void *a, size_t len, int prot) {
    REAL(mprotect);
    wx_touch(a, len);
    return real_mprotect(a, len, prot);
}

API int pkey_mprotect(void *a, size_t len, int prot, int pkey) {
    REAL(pkey_mprotect);
    wx_touch(a, len);
    return real_pkey_mprotect(a, len, prot, pkey);
}

API int munmap(void *a, size_t len) {
    REAL(munmap);
    wx_touch(a, len);
    return real_munmap(a, len);
}

API void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off) {
    REAL(mmap);
    if (flags & MAP_FIXED) wx_touch(a, len);
    return real_mmap(a, len, prot, flags, fd, off);
}

API void *mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(a, len, prot, flags, fd, off);
}

API void *mremap(void *a, size_t len, size_t nlen, int flags, ...) {
    REAL(mremap);
    va_list ap;
    va_start(ap, flags);
    void *to = flags & MREMAP_FIXED ? va_arg(ap, void *) : NULL;
    va_end(ap);
    wx_touch(a, len);
    if (to) wx_touch(to, nlen);
    return flags & MREMAP_FIXED ? real_mremap(a, len, nlen, flags, to) : real_mremap(a, len, nlen, flags);
}

API int execve(const char *path, char *const argv[], char *const envp[]) {
    REAL(execve);
    char **e = active ? with_ours(envp) : (char **)envp;
    report();
    int r = real_execve(path, argv, e);
    int err = errno;
    if (active) rebase();
    errno = err;
    return r;
}

API int execvpe(const char *file, char *const argv[], char *const envp[]) {
    REAL(execvpe);
    char **e = active ? with_ours(envp) : (char **)envp;
    report();
    int r = real_execvpe(file, argv, e);
    int err = errno;
    if (active) rebase();
    errno = err;
    return r;
}

API int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }
API int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

API int fexecve(int fd, char *const argv[], char *const envp[]) {
    REAL(fexecve);
    char **e = active ? with_ours(envp) : (char **)envp;
    report();
    int r = real_fexecve(fd, argv, e);
    int err = errno;
    if (active) rebase();
    errno = err;
    return r;
}

static char **va_argv(const char *arg0, va_list ap, char ***envp) {
    va_list c;
    va_copy(c, ap);
    int n = 1;
    while (va_arg(c, char *)) n++;
    va_end(c);
    char **v = malloc((n + 1) * sizeof *v);
    if (!v) return NULL;
    v[0] = (char *)arg0;
    for (int i = 1; i < n; i++) v[i] = va_arg(ap, char *);
    (void)va_arg(ap, char *);
    v[n] = NULL;
    if (envp) *envp = va_arg(ap, char **);
    return v;
}

API int execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    char **v = va_argv(arg, ap, NULL);
    va_end(ap);
    if (!v) return -1;
    return execve(path, v, environ);
}
API int execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    char **v = va_argv(arg, ap, NULL);
    va_end(ap);
    if (!v) return -1;
    return execvpe(file, v, environ);
}
API int execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    char **env = NULL;
    char **v = va_argv(arg, ap, &env);
    va_end(ap);
    if (!v) return -1;
    return execve(path, v, env);
}

API int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                    const posix_spawnattr_t *at, char *const argv[], char *const envp[]) {
    REAL(posix_spawn);
    return real_posix_spawn(pid, path, fa, at, argv, active ? with_ours(envp) : envp);
}
API int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                     const posix_spawnattr_t *at, char *const argv[], char *const envp[]) {
    REAL(posix_spawnp);
    return real_posix_spawnp(pid, file, fa, at, argv, active ? with_ours(envp) : envp);
}

/* SIGTRAP must stay deliverable: a trap while it is blocked kills. */
API int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    REAL(sigprocmask);
    if (active && set && how != SIG_UNBLOCK) {
        sigset_t s = *set;
        sigdelset(&s, SIGTRAP);
        return real_sigprocmask(how, &s, old);
    }
    return real_sigprocmask(how, set, old);
}

API int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    REAL(pthread_sigmask);
    if (active && set && how != SIG_UNBLOCK) {
        sigset_t s = *set;
        sigdelset(&s, SIGTRAP);
        return real_pthread_sigmask(how, &s, old);
    }
    return real_pthread_sigmask(how, set, old);
}

/* A program's own SIGTRAP handler is chained behind ours. */
API int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    REAL(sigaction);
    if (active && sig == SIGTRAP) {
        if (old) *old = old_trap;
        if (act) old_trap = *act;
        return 0;
    }
    if (active && act && sigismember(&act->sa_mask, SIGTRAP) == 1) {
        /* Nor blocked while a handler runs (a handler that reaches a
         * probe would be killed). */
        struct sigaction a = *act;
        sigdelset(&a.sa_mask, SIGTRAP);
        return real_sigaction(sig, &a, old);
    }
    return real_sigaction(sig, act, old);
}

/* ---- start ---- */

static int setup(const char *sock, const char *out) {
    if (!sock || !out || strlen(sock) >= sizeof sock_path || strlen(out) >= sizeof out_dir) return -1;
    strcpy(sock_path, sock);
    strcpy(out_dir, out);
    arrays = big_alloc(sizeof(uint64_t *) * MAXTHR);
    if (!arrays) return -1;
    /* The kernel's rt_sigaction with our own restorer: a trap returns
     * through the runtime, not through libc's __restore_rt (which would
     * be counted once per trap when libc is covered). */
    struct {
        void *handler;
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
    } ksa = {(void *)on_trap, SA_SIGINFO | SA_RESTART | SA_NODEFER | 0x04000000 /* SA_RESTORER */,
             profdev_cov_restore, 0};
    sigaction(SIGTRAP, NULL, &old_trap);
    raw6(SYS_rt_sigaction, SIGTRAP, (long)&ksa, 0, 8, 0, 0);
    /* A mask inherited across exec (posix_spawnattr_setsigmask, a
     * parent's blocked set) may hold SIGTRAP: not in this thread. */
    uint64_t trap_bit = 1ull << (SIGTRAP - 1);
    raw6(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&trap_bit, 0, 8, 0, 0);
    int fatal[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction cur;
        if (sigaction(fatal[i], NULL, &cur) == 0 && cur.sa_handler == SIG_DFL &&
            !(cur.sa_flags & SA_SIGINFO))
            signal(fatal[i], on_fatal);
    }
    pthread_atfork(prepare, parent, child);
    mem_reopen();
    return 0;
}

__attribute__((constructor)) static void start(void) {
    const char *sock = getenv("PROFDEV_COV_SOCK");
    const char *out = getenv("PROFDEV_COV_OUT");
    if (!sock || !out) return;
    if (setup(sock, out)) return;
    uint64_t *main_array = new_array();
    if (!main_array) return;
    set_gs(main_array);
    active = 1;
    /* The launch window (see there). */
    const char *w = getenv("PROFDEV_COV_WINDOW_MS");
    unsigned long ms = w && *w ? strtoul(w, NULL, 10) : WX_DEFAULT_MS;
    if (ms > 0) {
        wx_until = ~0ull;
        __atomic_store_n(&wx_open, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&wx_launch, 1, __ATOMIC_RELEASE);
    }
    cover_all(NULL, 0);
    if (ms > 0) {
        /* Planning (a module's first run) does not eat the window. */
        wx_span = (ms > 3600000ul ? 3600000ul : ms) * 1000000ull;
        wx_until = mono_ns() + wx_span;
        __atomic_store_n(&wx_launch, 0, __ATOMIC_RELEASE);
    }
}

__attribute__((destructor)) static void stop(void) { report(); }

/* Attach mode: see the crate's documentation (profdev_coverage::launch,
 * "Attach entry"). `config` is "SOCK\nOUT\n"; `tids` threads are stopped
 * with their PCs in `pcs`; gs_out[i] receives the GS base the injector
 * must give thread i before resuming it. Returns 0 or -1. */
API int profdev_cov_attach(const char *config, const uint64_t *pcs, uint64_t npcs,
                           uint64_t *gs_out, uint64_t nthreads) {
    if (active || !config) return -1;
    char sock[4096], out[4096];
    const char *nl = strchr(config, '\n');
    if (!nl || (size_t)(nl - config) >= sizeof sock) return -1;
    memcpy(sock, config, nl - config);
    sock[nl - config] = 0;
    const char *o = nl + 1;
    const char *nl2 = strchr(o, '\n');
    size_t ol = nl2 ? (size_t)(nl2 - o) : strlen(o);
    if (ol >= sizeof out) return -1;
    memcpy(out, o, ol);
    out[ol] = 0;
    if (setup(sock, out)) return -1;
    for (uint64_t i = 0; i < nthreads; i++) {
        uint64_t *a = new_array();
        if (!a) return -1;
        gs_out[i] = (uint64_t)(uintptr_t)a;
    }
    /* The calling thread (the injector's) counts into a fresh array too. */
    uint64_t *mine = new_array();
    if (!mine) return -1;
    set_gs(mine);
    active = 1;
    cover_all(pcs, npcs);
    return 0;
}

/* Attach mode: write a report now (the process goes on; later reports
 * hold only what ran after this one). */
API void profdev_cov_flush(void) {
    pthread_mutex_lock(&lock);
    report();
    rebase();
    pthread_mutex_unlock(&lock);
}
