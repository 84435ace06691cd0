/*
 * libprofdev_mprof.so: profdev mprof's accounting library (LD_PRELOAD).
 *
 * Interposes the malloc family and charges each block's requested bytes to
 * its allocating site: the return address of the allocation call, or, when
 * that lies in a known wrapper (operator new, Rust's alloc crate, strdup,
 * g_malloc, xmalloc...), the first return address outside the wrappers.
 * A free subtracts the block's bytes from the site that allocated it;
 * high-water marks (per site, per module) rise on allocation only.
 *
 * Bookkeeping lives beside the blocks: a map keyed by block address (a
 * page map of 8-byte entries, no lock, see "the block table"), so a block
 * this library did not allocate (before it was loaded, or while it was
 * busy inside itself) is never subtracted from anything.
 *
 * Exactness, and what it costs. A site's high water is the most its
 * blocks held at once; with threads, "at once" needs an order of the
 * site's allocations and frees that agrees with what the program itself
 * orders (a barrier between two threads' mallocs and their frees must put
 * both mallocs first: mprof_e2e's known.c checks exactly that). Per-thread
 * deltas merged later cannot give that order: a batch of +1 MiB, -1 MiB
 * flushed after the barrier has lost the moment both MiBs were live, and
 * delaying frees instead invents peaks that never were. So a site's and
 * its module's (whose high water is that of the sum of its sites) bytes
 * are kept by an exact limit counter (see "lanes"): each thread adds to
 * its own lane at the site (a compare-and-swap on a line no other thread
 * writes) while it stays within an allowance handed out under the
 * module's spin lock, the allowances together never reaching past the
 * high water; a call past its allowance takes the lock and folds every
 * lane of the module, which gives the exact bytes at that instant, so
 * the high water rises exactly when and by what the program's order
 * says. While the process has one thread (glibc's __libc_single_threaded)
 * no lock and no lane is used: the counters are written in place.
 * calloc, realloc and the mapping pools' calls use the lanes too, and
 * so do whole stacks (a stack has no high water: its counts go to its
 * own lane of the thread's, beside the site's); past NLANES threads an
 * update takes the module's lock (folding the module's open lanes
 * first, or closing them for good: see "lanes"). Allocation counts
 * (blocks, bytes) go to the lane with the bytes. The common call (counting on, a return
 * address this thread has met: a per-thread cache of 1,024, or one inside a
 * wrapper whose caller one table step finds: see "wcache") is inline in
 * malloc and free, without the recursion guard's writes. --peak and
 * --dhat take one global lock instead (no lanes): the global peak is
 * ordered with every site's bytes.
 *
 * What threads cost, measured (issue 29, bench/README.md "Threads" and
 * "Lanes"): the lock's one atomic exchange per call made its line, and
 * the site's, move between CPUs on every call where two threads
 * allocate at one site (alloc_micro: 5.5x to 5.8x native CPU), and its
 * holder losing its CPU made the other wait. A lane's compare-and-swap
 * is still a locked instruction, 9.4 ns uncontended on the 2-vCPU VM
 * (two per malloc/free pair, against about 11 ns for the native pair),
 * and the fold came about once per 200 to 1,000 calls (alloc_micro's
 * churn near its high water), most of them calls sent to fold by the
 * other thread's fold closing their lane: about once per 900 since such
 * a call uses its lane opened again. With the lane's update inline on
 * every path (it was an outlined call saving six registers on the free
 * path and with stacks: 17% to 24% of the two threads' added
 * instructions), two threads take 2.5x native CPU, 3.0x with stacks
 * (bench/README.md "two threads' lanes, inline"), not the 2x aimed at
 * (one thread, no lane and no lock, is 2.3x). Tried and
 * dropped before the lanes: a fetch-and-add per counter without the lock
 * (five atomics on the contended line per allocation: 2x slower than
 * the lock), waiting by reading before the exchange (no difference
 * beyond the noise). Tried and dropped after them: plain stores in the
 * lane with the owner marking itself inside, a fold closing the lanes
 * behind membarrier(PRIVATE_EXPEDITED) and waiting for owners inside
 * (a fold waits for an owner preempted inside: 5 to 30 s under load);
 * the owner's update a restartable sequence (rseq) and the fold's fence
 * membarrier(PRIVATE_EXPEDITED_RSEQ) (20% less CPU than the
 * compare-and-swap in most runs, but each fold's membarrier interrupts
 * the other thread: seconds of system time in one run of three). Both
 * need fewer folds first. One thread's pair costs about 6.8 ns over
 * the native 5.5 (perf, bench/README.md "Where one thread's call
 * goes"): two entries per call, the block table's two dependent loads
 * and its store, the site cache and the counters; 1.5x would need a
 * different design (the site beside the block, one entry), not a trim.
 *
 * The real allocator is glibc's, reached through its exported
 * __libc_malloc family (no dlsym, which itself allocates). The counters
 * live in a file shared with profdev (see "the shared table"), so they
 * outlive _exit, signals and SIGKILL; on a normal exit they are written
 * to a fresh text report (O_CREAT|O_EXCL|O_NOFOLLOW, 0600) in the private
 * directory named by PROFDEV_MPROF_DIR, and the shared file is removed.
 *
 * fork: the child starts from zero (its tables are emptied), so summing
 * the reports of all processes counts every allocation once; blocks the
 * child inherited are not in its table and their frees are not counted.
 * exec: LD_PRELOAD stays in the environment and the new image loads this
 * library afresh; each image writes its own report.
 *
 * Whole stacks (PROFDEV_MPROF_STACKS=1): each block of pool 1 is also
 * charged to its call stack, the site then the callers a checked
 * frame-pointer walk finds (see "stacks" below).
 *
 * Pools (PROFDEV_MPROF_POOLS, startmp's digits, pool 1 when unset): 1 the
 * malloc family; 2 anonymous mappings and the break the program makes
 * itself; 3 file mappings it makes (see "pools 2 and 3" below). All pools
 * charge the same sites and modules: Inferno's histogram mixes its pools.
 */
#include "mprof.h"

#define POOL1 1 /* the malloc family */
#define POOL2 2 /* anonymous mappings and the break, made by the program */
#define POOL3 4 /* file mappings made by the program */

/* ---- state ------------------------------------------------------------ */

static __thread int busy __attribute__((tls_model("initial-exec")));
/* PROFDEV_MPROF_TEMPORARY=1 (mprof --temporary): the block this thread
 * allocated last; freed before the thread's next allocation, it is
 * temporary (heaptrack's definition), counted per site and stack (ntemp).
 * Set at every allocation of pool 1, counted or not. Off, it costs a
 * well-predicted branch (on: about 7% more CPU on alloc_micro's one
 * thread, bench/README.md). */
static int temps;
static __thread uintptr_t last_block __attribute__((tls_model("initial-exec")));
static int inited;
static int enabled;
/* enabled and not DHAT: malloc and free may take their inline path. */
static int fast;
/* enabled and pool 1 (the malloc family) asked for. */
static int heap;
/* PROFDEV_MPROF_DHAT=1 (mprof --dhat): also block lifetimes, blocks per
 * site, and every site's bytes at the global peak (t-gmax), under one
 * global lock. Times are microseconds of CLOCK_MONOTONIC since start. */
static int dhat;
/* PROFDEV_MPROF_PEAK=1 (mprof --peak): what each site and stack held at
 * the global peak (DHAT's t-gmax), under the same global lock (see
 * "the peak"). global: dhat or peak, the global lock taken. */
static int peak, global;
static uint64_t peak_epoch;
static uint64_t t0, tg;
static int peak_pending;
static int64_t gcur, ghw;
static char outdir[4096];

static void *map(size_t n)
{
    void *p = sys_mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 0 : p;
}

/* Modules: each link map seen at a site. */
#define MAX_MODULES 1024
/* Lanes per site (see "lanes"), and of one module open at once. */
#define NLANES 8
#define MAX_OPEN 12
/* A site's counters. */
struct counters {
    int64_t cur, hw;
    uint64_t nalloc, bytes, nlive; /* blocks (and mappings) allocated, bytes, live now */
};

struct module {
    uintptr_t l_addr;
    const void *lm;
    char path[512];
    uint64_t dev, ino;
    _Atomic int resident_taken;
    char pad0[64 - (2 * sizeof(void *) + 512 + 16 + sizeof(int)) % 64];
    /* One cache line: the lock that guards cur and hw, and the counters
     * of the module's sites: one lock per update, and a site's and its
     * module's counters change together, so the module's high water is
     * that of its sites' sum. The counters of the module's first site
     * live on this line too (resident): a module whose allocations come
     * from one line moves one cache line between threads, not two. */
    atomic_flag lock;
    char lpad[sizeof(int64_t) - sizeof(atomic_flag)];
    int64_t cur, hw;
    struct counters resident;
    /* Lanes of this module's sites that hold an allowance (see "lanes"),
     * under the lock: site index << 8 | lane. */
    uint32_t nopen;
    uint32_t open[MAX_OPEN];
    uint32_t nolanes; /* back to the lock for good (see "lanes") */
    uint32_t nlocked; /* updates under the lock with lanes open, since a lane's fold */
    char opad[64 - 12 - 4 * MAX_OPEN];
};
_Static_assert(sizeof(struct module) % 64 == 0, "a module's hot line is a cache line");
static struct module *modules;
/* The counters of sites in no module: the slot after the last module. */
#define nomodule (modules[MAX_MODULES])
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;

/* A thread's lane at a site (see "lanes"): one cache line, written by
 * its thread only (word also by a fold, under the module's lock). word:
 * open << 63 | allowance << 32 | (uint32_t)delta; 0 closed. The counts
 * add to the site's. */
struct lane {
    _Atomic uint64_t word;
    _Atomic uint64_t nalloc, bytes, nlive, ntemp;
    char pad[64 - 5 * 8];
};
_Static_assert(sizeof(struct lane) == 64, "a lane is a cache line");

/* Sites, keyed by their (runtime) return address. */
#define SITE_BITS 16
#define NSITES (1u << SITE_BITS)
/* A site's pc and module (read on every call) are on one cache line,
 * its counters (written on every call, under its module's lock) on
 * the next. */
struct site {
    _Atomic uintptr_t pc;
    _Atomic int module; /* 0 unresolved, -1 none, else index + 1 */
    struct module *mod; /* its module's counters (nomodule for none), set before module */
    _Atomic uint32_t pools; /* POOL1..3 bits charged here (set on slow paths only) */
    int resident;           /* c is its module's resident counters (for the table's reader) */
    struct counters *c;     /* own, or its module's resident ones; under the module's lock */
    char pad0[64 - 2 * sizeof(uintptr_t) - 2 * sizeof(void *) - 2 * sizeof(uint32_t)];
    struct counters own;
    char pad1[64 - sizeof(struct counters)];
    int64_t curbk, hwbk, gb, gbk; /* DHAT and --peak: under the global lock */
    uint64_t tl, sumborn;         /* the same: lifetimes ended, births of the live */
    uint64_t pepoch;              /* --peak: the snapshot gb and gbk hold ("the peak") */
    uint64_t ntemp;               /* temporary blocks, under the counters' lock */
    struct lane lanes[NLANES];
};
_Static_assert(sizeof(struct site) == 192 + 64 * NLANES, "a site is three cache lines and lanes");
static struct site *sites;

/* Stacks: each allocation's whole call stack (with PROFDEV_MPROF_STACKS=1),
 * merged per unique stack. A stack is its site (found as above, past the
 * wrappers) followed by the callers found by walking frame pointers from
 * the site's frame (walk_fp): at most MAX_DEPTH frames, each frame
 * pointer checked before it is read (8-aligned, strictly above the one
 * before, below the thread's stack top); the walk ends where a caller
 * keeps no frame pointer (the stack is then shorter, never wrong by a
 * read). Open addressing by the frames' hash; slot 0 is the overflow
 * entry: a stack met when the table is full (max_stacks in use, or
 * STACK_PROBES slots taken) is charged there. A stack's counters change
 * under its site's module lock, with the site's (a stack's first frame
 * is its site: one module), or, where the site's update goes through
 * the thread's lane, in the stack's lane of that thread (see "lanes");
 * the overflow entry's by atomics. Frames are
 * appended to a shared array of (pc, module) pairs. */
#define MAX_DEPTH 64
#define STACK_BITS 14
#define NSTACKS (1u << STACK_BITS)
#define NFRAMES (1u << 19)
#define STACK_PROBES 64
/* A stack's key (read by every lookup) and its counters (written by every
 * call) are on two cache lines: threads looking stacks up do not take
 * the line another thread writes. */
struct stack {
    _Atomic uint64_t key;   /* the frames' hash (never 0); 0 free */
    _Atomic uint32_t ready; /* frames written */
    uint32_t depth, first, site;
    char pad0[64 - 24];
    uint64_t nalloc, bytes, nlive;
    int64_t cur;
    uint64_t ntemp;            /* temporary blocks */
    uint64_t pepoch, plive;    /* --peak: the snapshot pcur and plive hold */
    int64_t pcur;
};
_Static_assert(sizeof(struct stack) == 128, "a stack is two cache lines");
struct frame {
    uint64_t pc;
    int32_t module; /* index, -1 none */
    uint32_t pad;
};
/* A thread's counts at a stack (see "lanes"): written by its lane's
 * thread alone, added to the stack's by the report and the table's
 * reader; a stack's lanes are NLANES lines in a row (stack_lanes[stack *
 * NLANES + lane]). */
struct stack_lane {
    _Atomic uint64_t nalloc, bytes, nlive;
    _Atomic int64_t cur;
    _Atomic uint64_t ntemp;
    char pad[64 - 5 * 8];
};
_Static_assert(sizeof(struct stack_lane) == 64, "a stack's lane is a cache line");
static int stacks_on;
static uint32_t max_stacks = NSTACKS - NSTACKS / 4;
static struct stack *stacks;
static struct frame *frames;
static struct stack_lane *stack_lanes;
static uint32_t *used; /* indices of created sites (DHAT's snapshots, the table's reader) */

/* ---- the shared table -------------------------------------------------
 *
 * The modules, the sites and the counters above live in one area: with a
 * report directory, a MAP_SHARED mapping of a fresh file there,
 * live.PID.K (created O_CREAT|O_EXCL|O_NOFOLLOW, 0600), so that the counts
 * outlive the process however it ends (_exit, a signal, SIGKILL): profdev
 * reads the file once the process is gone (profdev_mprof::read_live).
 * Without one (or if the file cannot be made), an anonymous mapping.
 * Layout: this header (one page; the reader finds every offset and size
 * here and checks the file's size against them), the modules (MAX_MODULES
 * + 1, the last one sites in no module), the indices of the sites in use
 * (nused of them), the sites (NSITES, by hash).
 *
 * state says whether the file is still the report: COUNTING while the
 * process runs (or after it died without its destructor), WRITING while
 * the destructor writes the text report mprof.PID.report_k (the reader
 * takes the text report if it is complete, else this table), DONE once
 * it is written, after which the file is removed. A forked child gets a
 * table of its own (a new file, modules kept, sites empty). */
#define LIVE_COUNTING 0
#define LIVE_WRITING 1
#define LIVE_DONE 2
struct live_header {
    char magic[16]; /* "profdev-mlive 1" */
    uint32_t header_size, pid;
    uint64_t total_size;
    uint64_t modules_off, used_off, sites_off;
    uint32_t max_modules, nsites, module_size, site_size;
    /* offsets within a module: l_addr, path, dev, ino, cur, hw, resident counters */
    uint32_t m_l_addr, m_path, m_path_size, m_dev, m_ino, m_cur, m_hw, m_resident;
    /* offsets within a site: pc, module, pools, resident flag, own counters */
    uint32_t s_pc, s_module, s_pools, s_resident, s_own, counters_size;
    _Atomic uint32_t state, report_k;
    _Atomic int h_nmodules;
    _Atomic uint32_t h_nused;
    _Atomic uint64_t h_untracked, h_unknown_frees, h_table_failures;
    /* Whole stacks (see "stacks"): the table's place, its size, the
     * stacks and frames in use (slot 0 the overflow entry). */
    uint64_t stacks_off, frames_off;
    uint32_t nstacks, nframes, stack_size, frame_size;
    _Atomic uint32_t h_nstacks, h_nframes;
    /* Sampling: objects are counted in units of 1/2^obj_shift (0: exact). */
    uint32_t obj_shift;
    /* Lanes (see "lanes"): their offset in a site, number and size; a
     * lane's word, then its counts nalloc, bytes, nlive (8 bytes each). */
    uint32_t s_lanes, nlanes, lane_size;
    /* Stacks' lanes (see "lanes"): NLANES of stack_lane_size bytes per
     * stack, the stacks' in a row from stack_lanes_off. */
    uint32_t stack_lane_size;
    uint64_t stack_lanes_off;
};
_Static_assert(sizeof(struct live_header) <= 4096, "the header is one page");
_Static_assert(offsetof(struct live_header, s_lanes) == 212 &&
                   offsetof(struct live_header, stack_lanes_off) == 232 &&
                   sizeof(struct live_header) == 240,
               "the reader's header layout");
_Static_assert(offsetof(struct counters, cur) == 0 && offsetof(struct counters, hw) == 8 &&
                   offsetof(struct counters, nalloc) == 16 &&
                   offsetof(struct counters, bytes) == 24 && offsetof(struct counters, nlive) == 32,
               "the reader's counters layout");
static struct live_header fallback_header;
static struct live_header *live = &fallback_header;
#define nmodules (live->h_nmodules)
#define nused (live->h_nused)
static char live_path[4200]; /* the shared table's file, if any */

#define PAGE_ROUND(n) (((n) + 4095) & ~(size_t)4095)
#define MODULES_OFF ((size_t)4096)
#define USED_OFF (MODULES_OFF + PAGE_ROUND(sizeof(struct module) * (MAX_MODULES + 1)))
#define SITES_OFF (USED_OFF + PAGE_ROUND(sizeof(uint32_t) * NSITES))
#define STACKS_OFF (SITES_OFF + PAGE_ROUND(sizeof(struct site) * NSITES))
#define FRAMES_OFF (STACKS_OFF + PAGE_ROUND(sizeof(struct stack) * NSTACKS))
#define STACK_LANES_OFF (FRAMES_OFF + PAGE_ROUND(sizeof(struct frame) * NFRAMES))
#define AREA_SIZE (STACK_LANES_OFF + PAGE_ROUND(sizeof(struct stack_lane) * NLANES * NSTACKS))
#define AREA_PAGES (AREA_SIZE / 4096)
_Static_assert(AREA_SIZE <= 64 << 20, "the reader's bound (profdev_mprof::MAX_LIVE)");

/* The file is sparse, and a hole touched on a full filesystem would be
 * SIGBUS for the program: a page of the area is given its block
 * (fallocate, FALLOC_FL_KEEP_SIZE) before it is first read or written,
 * and what cannot have one is not counted (the site, or module, is then
 * untracked). live_fd stays open (O_CLOEXEC) for that; its device and
 * inode are checked first, in case the program closed it and the number
 * now names another file. With an anonymous area, every page is fine. */
static int live_fd = -1;
static dev_t live_dev;
static ino_t live_ino;
static char *area_base;
static _Atomic uint64_t page_ok[(AREA_PAGES + 63) / 64];

static inline int page_known(const void *p)
{
    if (live_fd < 0)
        return 1;
    size_t pg = (size_t)((const char *)p - area_base) / 4096;
    return (atomic_load_explicit(&page_ok[pg / 64], memory_order_acquire) >> (pg % 64)) & 1;
}

/* Blocks under [p, p + n) of the area; 0 if they cannot be had. */
static __attribute__((noinline)) int ensure_slow(const void *p, size_t n)
{
    size_t off = (size_t)((const char *)p - area_base);
    for (size_t pg = off / 4096; pg <= (off + n - 1) / 4096; pg++) {
        uint64_t bit = 1ULL << (pg % 64);
        if (atomic_load_explicit(&page_ok[pg / 64], memory_order_acquire) & bit)
            continue;
        struct stat st;
        if (fstat(live_fd, &st) || st.st_dev != live_dev || st.st_ino != live_ino)
            return 0;
        if (fallocate(live_fd, FALLOC_FL_KEEP_SIZE, (off_t)pg * 4096, 4096))
            return 0;
        atomic_fetch_or_explicit(&page_ok[pg / 64], bit, memory_order_release);
    }
    return 1;
}

static inline int ensure(const void *p, size_t n)
{
    if (live_fd < 0 || (page_known(p) && page_known((const char *)p + n - 1)))
        return 1;
    return ensure_slow(p, n);
}

/* Return-address classification cache: 1 plain, 2 wrapper. */
#define CLS_BITS 16
#define NCLS (1u << CLS_BITS)
struct cls {
    _Atomic uintptr_t pc;
    _Atomic int value;
};
static struct cls *cls;


/* Blocks: a two-level map from a block's address to its entry, as a page
 * map: the top level has one pointer per 64 MiB of the 47-bit address
 * space, a leaf one 8-byte entry per 16-byte granule of its 64 MiB
 * (glibc's blocks start 16-aligned and at least 32 bytes apart, so a
 * granule holds at most one block's start). Both levels are mapped
 * MAP_NORESERVE and touched only where blocks are: about 8 bytes of
 * table per 16 bytes of heap in use where blocks are small, one page per
 * large block. An entry is size << 17 | site << 1 | 1 (0: none).
 *
 * No lock: a block's entry is written by the thread that allocated it,
 * after the allocator returned it, and cleared by the thread that frees
 * it, before the allocator takes it back; the program orders the two
 * (it must hand the pointer over), and the allocator orders the clearing
 * before the address's next allocation. Only a leaf's creation is shared
 * (a compare-and-swap of its top-level pointer). In DHAT mode each entry
 * is followed by the block's birth time; with stacks, by its stack. */
#define LEAF_SHIFT 26
#define LEAF_SLOTS (1u << (LEAF_SHIFT - 4))
#define TOP_SLOTS (1u << (47 - LEAF_SHIFT))
#define SIZE_LIMIT (1ULL << 47)
static _Atomic(_Atomic uint64_t *) *top;
static unsigned entry_shift; /* 1 in DHAT mode or with stacks, 2 with both */
static unsigned stack_word;  /* the entry's word holding its stack, 0 none */
#define MAX_LEAVES 4096
static uint32_t leaves[MAX_LEAVES]; /* top indices in use, for fork */
static _Atomic uint32_t nleaves;

/* The block table for `profdev mprof -p PID --scan` (profdev_mprof::scan's
 * table.rs), which finds this in the library's writable data by its magic
 * and reads, in the stopped process, the entries of the blocks it found
 * unreachable and the sites and stacks they name. Addresses, not values:
 * the reader follows them (each read bounded). Writable (not const): a
 * const copy would be read-only after relocation, and is looked for in
 * the data only. */
struct scan_table {
    char magic[16]; /* "profdev-mscan 1" */
    uint32_t leaf_shift, top_slots, max_leaves, pad;
    void *top;            /* &top: the top level's address */
    unsigned *entry_shift; /* &entry_shift */
    unsigned *stack_word;  /* &stack_word */
    uint32_t *leaves;      /* leaves, nleaves of them */
    _Atomic uint32_t *nleaves;
    struct live_header **live; /* &live: the shared table (sites, stacks) */
    int *enabled;              /* &enabled: counting */
};
__attribute__((used)) struct scan_table mprof_scan_table = {
    "profdev-mscan 1", LEAF_SHIFT, TOP_SLOTS, MAX_LEAVES, 0, (void *)&top, &entry_shift,
    &stack_word,       leaves,     &nleaves,  &live,      &enabled};

#define untracked_allocs (live->h_untracked)
#define unknown_frees (live->h_unknown_frees)
#define table_failures (live->h_table_failures)

/* ---- helpers --------------------------------------------------------- */

static inline uint64_t hash(uintptr_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* glibc's flag: true until the process creates its first thread (and
 * never true again). While it holds, no lock is taken: only this thread
 * can be inside the library. */
extern char __libc_single_threaded;

/* Held locks are rare: the waiting loop is out of line. */
static __attribute__((noinline)) void spin_wait(atomic_flag *f)
{
    for (unsigned n = 0; atomic_flag_test_and_set_explicit(f, memory_order_acquire); n++) {
        if (n < 64)
            __builtin_ia32_pause();
        else
            sched_yield(); /* the holder may have lost its CPU */
    }
}
static inline void spin_raw(atomic_flag *f)
{
    if (UNLIKELY(atomic_flag_test_and_set_explicit(f, memory_order_acquire)))
        spin_wait(f);
}
static inline void spin(atomic_flag *f)
{
    if (!__libc_single_threaded)
        spin_raw(f);
}
static inline void unspin(atomic_flag *f)
{
    atomic_flag_clear_explicit(f, memory_order_release);
}

static inline uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - t0;
}

static atomic_flag global_lock;

/* DHAT: every site's bytes and blocks now are those at t-gmax. */
static void snapshot_peak(void)
{
    uint32_t n = atomic_load(&nused);
    for (uint32_t i = 0; i < n && i < NSITES; i++) {
        if (!page_known(&used[i]))
            continue;
        struct site *s = &sites[used[i]];
        s->gb = s->c ? s->c->cur : 0;
        s->gbk = s->curbk;
    }
    peak_pending = 0;
}

#define NO_STACK UINT32_MAX

/* ---- the peak ---------------------------------------------------------
 *
 * --peak keeps what each site and stack held at the global peak without
 * copying every table at each new peak: a copy on write. peak_epoch
 * counts the pictures taken; one is taken (peak_passed) at the first
 * free after a new global high water, when what is live is exactly what
 * was live at the peak. Before a site's or stack's counters change, if
 * its saved picture is older than the last one taken (pepoch), its
 * counters have not changed since that picture and are saved as its
 * part of it (peak_keep). At the end its part of the last picture is the
 * saved one if taken in that epoch, else its counters as they are. All
 * under the global lock: exact in the program's order, one lock. */
static void peak_passed(void)
{
    if (dhat)
        snapshot_peak();
    peak_epoch++;
    peak_pending = 0;
}

static inline void peak_keep(struct site *s, uint32_t stk)
{
    if (s->pepoch != peak_epoch) {
        s->gb = s->c->cur;
        s->gbk = dhat ? s->curbk : (int64_t)s->c->nlive;
        s->pepoch = peak_epoch;
    }
    if (stk != NO_STACK) {
        struct stack *st = &stacks[stk];
        if (st->pepoch != peak_epoch) {
            st->pcur = st->cur;
            st->plive = st->nlive;
            st->pepoch = peak_epoch;
        }
    }
}

/* Bytes charged to or taken from a site and its module, together. */
static inline struct module *module_of_site(struct site *s)
{
    return s->mod;
}

/* raise: an allocation (counted, and high water may rise); else a block
 * put back (a failed realloc's). born: DHAT's birth time. */
/* A stack's counters, under its site's module lock (the overflow entry,
 * shared by all modules, by atomics). raise: an allocation. */
static inline void stack_add(uint32_t stk, int64_t size, int raise, uint64_t k)
{
    struct stack *st = &stacks[stk];
    if (UNLIKELY(!stk)) {
        if (raise) {
            atomic_fetch_add_explicit((_Atomic uint64_t *)&st->nalloc, k, memory_order_relaxed);
            atomic_fetch_add_explicit((_Atomic uint64_t *)&st->bytes, size, memory_order_relaxed);
        }
        atomic_fetch_add_explicit((_Atomic uint64_t *)&st->nlive, k, memory_order_relaxed);
        atomic_fetch_add_explicit((_Atomic int64_t *)&st->cur, size, memory_order_relaxed);
        return;
    }
    if (raise) {
        st->nalloc += k;
        st->bytes += size;
    }
    st->nlive += k;
    st->cur += size;
}

/* temp: the block was temporary (freed before its thread's next
 * allocation). */
static inline void stack_sub(uint32_t stk, int64_t size, uint64_t k, uint64_t temp)
{
    struct stack *st = &stacks[stk];
    if (UNLIKELY(!stk)) {
        atomic_fetch_sub_explicit((_Atomic uint64_t *)&st->nlive, k, memory_order_relaxed);
        atomic_fetch_sub_explicit((_Atomic int64_t *)&st->cur, size, memory_order_relaxed);
        if (temp)
            atomic_fetch_add_explicit((_Atomic uint64_t *)&st->ntemp, temp, memory_order_relaxed);
        return;
    }
    st->nlive -= k;
    st->cur -= size;
    if (UNLIKELY(temp))
        st->ntemp += temp;
}

/* ---- lanes --------------------------------------------------------
 *
 * Threads update a site's bytes without a shared line, exactly: an exact
 * limit counter (McKenney, "Is Parallel Programming Hard", 5.4). A
 * thread takes one of NLANES lanes for its life (lane_tls; the lanes of
 * a thread that ended go to the next); at each site its lane is a cache
 * line of its own holding, in one word, the bytes it added since the
 * last fold (delta) and how far it may go (allowance), changed by a
 * compare-and-swap that fails if the lane was closed. The module's lock
 * guards its sites' folded bytes (cur), their high water, and the list
 * of its open lanes; every open lane's allowance is at most the room
 * below the high water, split (for its site and for the module: the
 * allowances of a site's lanes sum to at most its hw - cur, those of a
 * module's to at most the module's), and a lane's delta never passes
 * its allowance, so the true bytes (cur plus the deltas) never pass the
 * high water without a fold seeing it. A call that would pass (or finds
 * its lane closed) takes the lock; if the fold it waited behind opened
 * its lane again with room for it, it updates the lane and is done (two
 * threads near the high water would otherwise fold in turn, each fold
 * sending the other, whose lane it closed, to fold again: alloc_micro's
 * two threads folded 204,526 times in 40 million calls, 45,000 times
 * with this). Else it folds: closes every open lane of
 * the module (an exchange each), adds their deltas to cur, which are
 * then the exact bytes at that instant, applies its own update there
 * (raising the high water if it must), and hands out new allowances.
 * Every other update under the module's lock (threads past NLANES, a
 * thread's last frees after its lane was given back, a block charged to
 * the stacks' overflow entry) folds first if a lane is open. Counts (blocks, bytes allocated, live, temporary) a lane's
 * thread adds to its lane, which the report and the table's reader add
 * to the site's; with whole stacks, the block's stack's counts (bytes
 * live too: a stack has no high water to keep in order) go to the
 * stack's lane of the same number, a line of its own written by the
 * thread alone (struct stack_lane), added likewise. A lane
 * idle at two folds in a row leaves the list (a closed lane: word 0).
 * A module whose list is full (MAX_OPEN lanes busy at once), or updated
 * 64 times under its lock while a lane is open between two of the lanes'
 * own folds (threads past NLANES; a thread's frees after its lane was
 * given back at its exit are a few), closes its lanes and goes back to
 * the lock for good (nolanes): no fold per call, at worst the lock's
 * cost.
 * In the shared table the lanes are the sites' too: the table's reader
 * (profdev_mprof::read_live) adds them, and a SIGKILLed process loses
 * nothing but an update half made (its delta in, its counts not). A
 * report (at exit, or a snapshot: mprof -p PID --snapshot) adds the
 * lanes as it reads them, without a lock, as the reader does (a snapshot
 * of a process whose threads go on may miss an update a fold is moving
 * from a lane to cur, as it may miss one under way anywhere). A forked child's table is fresh:
 * its lanes are empty and free, its one thread takes one again. */
#define LANE_OPEN (1ULL << 63)
#define LANE_IDLE (1u << 31) /* an open list's entry: idle at the last fold */
static __thread int lane_tls __attribute__((tls_model("initial-exec"))); /* 1..NLANES; 0 none yet, -1 none */
static _Atomic uint32_t lanes_taken;
static int lanes_ever; /* a lane was taken: the unlocked path looks for open lanes */
static pthread_key_t lane_key;
static int lane_key_ok;

static void lane_gone(void *p)
{
    (void)p;
    int l = lane_tls;
    lane_tls = -1; /* the thread's last calls take the lock */
    if (l > 0)
        atomic_fetch_and(&lanes_taken, ~(1u << (l - 1)));
}

static __attribute__((noinline)) int lane_claim(void)
{
    int l = -1;
    uint32_t t = atomic_load(&lanes_taken);
    while (lane_key_ok && (~t & ((1u << NLANES) - 1))) {
        int i = __builtin_ctz(~t);
        if (atomic_compare_exchange_weak(&lanes_taken, &t, t | 1u << i)) {
            l = i + 1;
            break;
        }
    }
    if (l > 0) {
        int b = busy;
        busy = 1; /* pthread_setspecific may allocate */
        if (pthread_setspecific(lane_key, (void *)1)) {
            atomic_fetch_and(&lanes_taken, ~(1u << (l - 1)));
            l = -1;
        }
        busy = b;
        lanes_ever = 1;
    }
    lane_tls = l;
    return l;
}

/* Under m's lock: close m's open lanes, their deltas into cur (exact). */
static void lanes_fold(struct module *m)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < m->nopen && i < MAX_OPEN; i++) {
        uint32_t e = m->open[i];
        struct site *s = &sites[(e & ~LANE_IDLE) >> 8];
        uint64_t w = atomic_exchange_explicit(&s->lanes[e & 0xff].word, 0, memory_order_acq_rel);
        int32_t d = (int32_t)(uint32_t)w;
        s->c->cur += d;
        m->cur += d;
        if (d)
            m->open[k++] = e & ~LANE_IDLE;
        else if (!(e & LANE_IDLE))
            m->open[k++] = e | LANE_IDLE;
    }
    m->nopen = k;
}

/* Under m's lock, after lanes_fold: open m's listed lanes, each with its
 * share of the room below the site's and the module's high water. */
static void lanes_grant(struct module *m)
{
    uint32_t n = m->nopen;
    int64_t b = (m->hw - m->cur) / (n ? n : 1);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = m->open[i] & ~LANE_IDLE, ks = 0;
        for (uint32_t j = 0; j < n; j++)
            ks += (m->open[j] & ~LANE_IDLE) >> 8 == e >> 8;
        struct site *s = &sites[e >> 8];
        int64_t a = (s->c->hw - s->c->cur) / ks;
        a = a < b ? a : b;
        a = a < 0 ? 0 : a > 0x7fffffff ? 0x7fffffff : a;
        atomic_store_explicit(&s->lanes[e & 0xff].word, LANE_OPEN | (uint64_t)a << 32,
                              memory_order_release);
    }
}

/* Under m's lock, after lanes_fold and an update made under the lock
 * (a thread without a lane): the lanes open again, or, the 64th time
 * since a lane's own fold, m goes back to the lock for good, its lanes
 * closed (see "lanes"). */
static void lanes_locked(struct module *m)
{
    if (++m->nlocked < 64) {
        lanes_grant(m);
        return;
    }
    m->nolanes = 1;
    m->nopen = 0;
}

#define LANE_ADD(ln, f, v)                                                                         \
    atomic_store_explicit(&(ln)->f, atomic_load_explicit(&(ln)->f, memory_order_relaxed) + (v),    \
                          memory_order_relaxed)
/* A lane's (or a stack's lane's) counts: k blocks of b bytes allocated,
 * live lk, temporary t; its thread is their only writer. */
#define LANE_COUNTS(ln, k, b, lk, t)                                                               \
    do {                                                                                           \
        if (k) {                                                                                   \
            LANE_ADD(ln, nalloc, k);                                                               \
            LANE_ADD(ln, bytes, b);                                                                \
        }                                                                                          \
        if (lk)                                                                                    \
            LANE_ADD(ln, nlive, (uint64_t)(lk));                                                   \
        if (UNLIKELY(t))                                                                           \
            LANE_ADD(ln, ntemp, t);                                                                \
    } while (0)

/* Whether lane word w is open with room for size more bytes (its delta
 * within the allowance and an int32): then *to is w with them added. */
static inline int lane_fits(uint64_t w, int64_t size, uint64_t *to)
{
    int64_t d = (int64_t)(int32_t)(uint32_t)w + size;
    *to = (w & ~0xffffffffULL) | (uint32_t)d;
    return LIKELY(w & LANE_OPEN) && LIKELY(d <= (int64_t)(w >> 32 & 0x7fffffff)) &&
           LIKELY(d >= INT32_MIN);
}

/* The thread's lane at s past its allowance (or closed): under the lock,
 * the lane takes the update if a fold this call waited behind opened it
 * again with room; else fold, apply the update to cur and the counters,
 * open the lane. */
static __attribute__((noinline)) void lane_slow(struct site *s, int lane, int64_t size, uint64_t nk,
                                               uint64_t bytes, int64_t lk, uint64_t temp)
{
    struct module *m = s->mod;
    spin(&m->lock);
    /* Another thread's fold closed the lane while this call waited for
     * the lock, and opened it again: with room enough, no fold (else two
     * threads near the high water fold in turn, each fold closing the
     * other's lane). */
    struct lane *ln = &s->lanes[lane - 1];
    uint64_t w = atomic_load_explicit(&ln->word, memory_order_relaxed), to;
    if (lane_fits(w, size, &to)) {
        atomic_store_explicit(&ln->word, to, memory_order_relaxed);
        LANE_COUNTS(ln, nk, bytes, lk, temp);
        unspin(&m->lock);
        return;
    }
    lanes_fold(m);
    m->nlocked = 0;
    s->c->cur += size;
    m->cur += size;
    if (s->c->cur > s->c->hw)
        s->c->hw = s->c->cur;
    if (m->cur > m->hw)
        m->hw = m->cur;
    s->c->nalloc += nk;
    s->c->bytes += bytes;
    s->c->nlive += lk;
    s->ntemp += temp;
    uint32_t e = (uint32_t)(s - sites) << 8 | (uint32_t)(lane - 1), i;
    for (i = 0; i < m->nopen && (m->open[i] & ~LANE_IDLE) != e; i++)
        ;
    if (i == m->nopen && !m->nolanes) {
        if (i < MAX_OPEN)
            m->open[m->nopen++] = e;
        else
            m->nolanes = 1;
    }
    if (m->nolanes)
        m->nopen = 0; /* all closed by the fold above */
    lanes_grant(m);
    unspin(&m->lock);
}

/* The same update of stack stk's counts in lane l (1..NLANES): the
 * lane's thread is their only writer. */
static inline void stack_lane_update(int l, uint32_t stk, int64_t size, uint64_t nk, uint64_t bytes,
                                     int64_t lk, uint64_t temp)
{
    struct stack_lane *sl = &stack_lanes[(size_t)stk * NLANES + (size_t)(l - 1)];
    LANE_ADD(sl, cur, size);
    LANE_COUNTS(sl, nk, bytes, lk, temp);
}

/* An update of s's bytes (size), blocks (nk), bytes allocated, live (lk)
 * and temporary blocks through the thread's lane, and of stack stk's
 * counts (NO_STACK none; never the overflow entry, whose counters are
 * atomics); 0 if it has no lane (the caller then takes the lock). */
static inline __attribute__((always_inline)) int lane_update(struct site *s, int64_t size,
                                                             uint64_t nk, uint64_t bytes,
                                                             int64_t lk, uint64_t temp,
                                                             uint32_t stk)
{
    int l = lane_tls;
    if (UNLIKELY(l <= 0) && (l < 0 || (l = lane_claim()) < 0))
        return 0;
    if (UNLIKELY(s->mod->nolanes))
        return 0;
    struct lane *ln = &s->lanes[l - 1];
    uint64_t w = atomic_load_explicit(&ln->word, memory_order_relaxed), to;
    if (UNLIKELY(!lane_fits(w, size, &to)) ||
        UNLIKELY(!atomic_compare_exchange_strong_explicit(&ln->word, &w, to, memory_order_acq_rel,
                                                          memory_order_relaxed))) {
        lane_slow(s, l, size, nk, bytes, lk, temp);
    } else {
        LANE_COUNTS(ln, nk, bytes, lk, temp);
    }
    if (stk != NO_STACK)
        stack_lane_update(l, stk, size, nk, bytes, lk, temp);
    return 1;
}

/* Whether a lane may be open in m (so an update under its lock must fold
 * first): lanes_ever spares the unlocked path the module's second line. */
#define LANES_OPEN(m) (UNLIKELY(lanes_ever) && UNLIKELY((m)->nopen))

/* stk: the block's stack (with stacks on and pool 1; else NO_STACK).
 * k: the objects it counts for (1, or a sampled block's weight in
 * 1/2^obj_shift units, see "sampling"). */
static inline void charge(struct site *s, int64_t size, int raise, uint64_t born, uint32_t stk,
                          uint64_t k)
{
    struct module *m = module_of_site(s);
    if (!global && stk && (!__libc_single_threaded || lanes_ever) &&
        lane_update(s, size, raise ? k : 0, raise ? (uint64_t)size : 0, (int64_t)k, 0, stk))
        return;
    atomic_flag *l = global ? &global_lock : &m->lock;
    spin(l);
    int open = !global && LANES_OPEN(m);
    if (open)
        lanes_fold(m);
    if (global) {
        if (peak)
            peak_keep(s, stk);
        gcur += size;
        if (raise && gcur > ghw) {
            ghw = gcur;
            if (dhat)
                tg = now_us();
            peak_pending = 1;
        }
    }
    if (dhat) {
        s->curbk++;
        s->sumborn += born;
        if (raise && s->c->cur + size > s->c->hw)
            s->hwbk = s->curbk;
    }
    s->c->cur += size;
    m->cur += size;
    s->c->nlive += k;
    if (raise) {
        s->c->nalloc += k;
        s->c->bytes += size;
        if (s->c->cur > s->c->hw)
            s->c->hw = s->c->cur;
        if (m->cur > m->hw)
            m->hw = m->cur;
    }
    if (stk != NO_STACK)
        stack_add(stk, size, raise, k);
    if (open)
        lanes_locked(m);
    unspin(l);
}

/* Never below 0, though each free matches an allocation. temp: the
 * block was temporary (k of them, else 0). */
static inline void discharge(struct site *s, int64_t size, uint64_t born, int whole, uint32_t stk,
                             uint64_t k, uint64_t temp)
{
    struct module *m = module_of_site(s);
    if (!global && stk && (!__libc_single_threaded || lanes_ever) &&
        lane_update(s, -size, 0, 0, whole ? -(int64_t)k : 0, temp, stk))
        return;
    atomic_flag *l = global ? &global_lock : &m->lock;
    spin(l);
    int open = !global && LANES_OPEN(m);
    if (open)
        lanes_fold(m);
    if (global) {
        if (peak_pending) /* the peak is behind us: keep its picture */
            peak_passed();
        if (peak)
            peak_keep(s, stk);
        gcur -= size;
    }
    if (dhat) {
        if (whole) { /* a block ends (not a mapping's part) */
            s->curbk--;
            s->sumborn -= born;
            s->tl += now_us() - born;
        }
    }
    if (whole)
        s->c->nlive -= k;
    if (temp)
        s->ntemp += temp;
    s->c->cur = s->c->cur > size ? s->c->cur - size : 0;
    m->cur = m->cur > size ? m->cur - size : 0;
    if (stk != NO_STACK)
        stack_sub(stk, size, k, temp);
    if (open)
        lanes_locked(m);
    unspin(l);
}

/* glibc 2.35's lock-free lookup of the object holding an address (weak:
 * absent on an older glibc, where dladdr1 serves). dladdr1 also finds
 * the nearest symbol, a linear walk of the object's symbol table: a new
 * site in bash cost about 20 us, most of mprof's start-up in a shell. */
extern int _dl_find_object(void *, struct dl_find_object *) __attribute__((weak));

const struct link_map *mprof_link_map_of(uintptr_t pc)
{
    if (_dl_find_object) {
        struct dl_find_object fo;
        return _dl_find_object((void *)pc, &fo) == 0 ? fo.dlfo_link_map : 0;
    }
    Dl_info info;
    struct link_map *lm = 0;
    if (!dladdr1((void *)pc, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return 0;
    return lm;
}

/* Is the return address pc inside a wrapper? Cached per address. */
static int is_wrapper(uintptr_t pc)
{
    uint64_t h = hash(pc);
    for (unsigned i = 0; i < 8; i++) {
        struct cls *c = &cls[(h + i) & (NCLS - 1)];
        uintptr_t k = atomic_load_explicit(&c->pc, memory_order_acquire);
        if (k == pc) {
            int v = atomic_load_explicit(&c->value, memory_order_acquire);
            if (v)
                return v == 2;
            break;
        }
        if (k == 0)
            break;
    }
    const struct link_map *lm = mprof_link_map_of(pc);
    if (lm)
        mprof_scan_module(lm);
    int v = mprof_skipped(pc - 1) ? 2 : 1;
    for (unsigned i = 0; i < 8; i++) {
        struct cls *c = &cls[(h + i) & (NCLS - 1)];
        uintptr_t zero = 0;
        if (atomic_compare_exchange_strong(&c->pc, &zero, pc) || zero == pc) {
            atomic_store_explicit(&c->value, v, memory_order_release);
            break;
        }
    }
    return v == 2;
}

/* ---- modules and sites ------------------------------------------------ */

static int module_index(uintptr_t pc)
{
    const struct link_map *lm = mprof_link_map_of(pc);
    if (!lm)
        return -1;
    int n = atomic_load_explicit(&nmodules, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (modules[i].lm == lm)
            return i;
    pthread_mutex_lock(&module_lock);
    n = atomic_load(&nmodules);
    for (int i = 0; i < n; i++)
        if (modules[i].lm == lm) {
            pthread_mutex_unlock(&module_lock);
            return i;
        }
    int r = -1;
    if (n < MAX_MODULES && ensure(&modules[n], sizeof modules[n])) {
        struct module *m = &modules[n];
        m->lm = lm;
        m->l_addr = lm->l_addr;
        if (lm->l_name && lm->l_name[0]) {
            strncpy(m->path, lm->l_name, sizeof m->path - 1);
        } else {
            ssize_t k = readlink("/proc/self/exe", m->path, sizeof m->path - 1);
            m->path[k > 0 ? k : 0] = 0;
        }
        struct stat st;
        if (!stat(m->path, &st)) {
            m->dev = st.st_dev;
            m->ino = st.st_ino;
        }
        atomic_store_explicit(&nmodules, n + 1, memory_order_release);
        r = n;
    }
    pthread_mutex_unlock(&module_lock);
    return r;
}

/* The site of pc (created on first use); its index, or NSITES if full. */
static uint32_t site_of(uintptr_t pc)
{
    uint64_t h = hash(pc);
    for (unsigned i = 0; i < NSITES; i++) {
        uint32_t j = (h + i) & (NSITES - 1);
        struct site *s = &sites[j];
        if (UNLIKELY(!ensure(s, sizeof *s)))
            return NSITES;
        uintptr_t k = atomic_load_explicit(&s->pc, memory_order_acquire);
        if (k == pc) {
            /* Created by another thread: wait (bounded) for its module,
             * yielding after a while (its maker may have lost its CPU); a
             * site still without one is not used (its mod is not set). */
            for (int spin = 0; spin < 1000000 &&
                               atomic_load_explicit(&s->module, memory_order_acquire) == 0;
                 spin++)
                if (spin < 1000)
                    __builtin_ia32_pause();
                else
                    sched_yield();
            return atomic_load_explicit(&s->module, memory_order_acquire) ? j : NSITES;
        }
        if (k == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&s->pc, &zero, pc)) {
                uint32_t u = atomic_fetch_add(&nused, 1);
                if (u < NSITES && ensure(&used[u], sizeof *used))
                    used[u] = j;
                int m = module_index(pc);
                struct module *mod = m < 0 ? &nomodule : &modules[m];
                int no = 0;
                s->resident = atomic_compare_exchange_strong(&mod->resident_taken, &no, 1);
                s->c = s->resident ? &mod->resident : &s->own;
                s->mod = mod;
                atomic_store_explicit(&s->module, m < 0 ? -1 : m + 1, memory_order_release);
                return j;
            }
            if (zero == pc) {
                i--; /* re-examine this slot */
                continue;
            }
        }
    }
    return NSITES;
}

/* ---- the block table -------------------------------------------------- */

static void *map_noreserve(size_t n)
{
    void *p = sys_mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
    return p == MAP_FAILED ? 0 : p;
}

static size_t leaf_bytes(void)
{
    return (size_t)LEAF_SLOTS * sizeof(uint64_t) << entry_shift;
}

static __attribute__((noinline)) _Atomic uint64_t *new_leaf(uintptr_t t)
{
    _Atomic uint64_t *leaf = map_noreserve(leaf_bytes());
    if (!leaf)
        return 0;
    _Atomic uint64_t *none = 0;
    if (!atomic_compare_exchange_strong(&top[t], &none, leaf)) {
        sys_munmap((void *)leaf, leaf_bytes());
        return none; /* another thread's */
    }
    uint32_t k = atomic_fetch_add(&nleaves, 1);
    if (k < MAX_LEAVES)
        leaves[k] = t;
    return leaf;
}

/* The entry of the block at addr; 0 when out of the map (and, unless
 * create, when its leaf does not exist). */
static inline _Atomic uint64_t *entry_at(uintptr_t addr, int create, unsigned shift)
{
    /* Out of the map (t >= TOP_SLOTS) or not 16-aligned: one test. */
    if (UNLIKELY(addr & (~(((uintptr_t)TOP_SLOTS << LEAF_SHIFT) - 1) | 15)))
        return 0;
    uintptr_t t = addr >> LEAF_SHIFT;
    _Atomic uint64_t *leaf = atomic_load_explicit(&top[t], memory_order_acquire);
    if (UNLIKELY(!leaf) && (!create || !(leaf = new_leaf(t))))
        return 0;
    return &leaf[(size_t)((addr >> 4) & (LEAF_SLOTS - 1)) << shift];
}
#define entry_of(addr, create) entry_at(addr, create, entry_shift)

/* The fast paths with stacks (never DHAT): entries of two words, the
 * stack in the second (entry_shift and stack_word 1, known here). */
static inline int table_insert_st(uintptr_t addr, uint64_t size, uint32_t site, uint32_t stk)
{
    _Atomic uint64_t *e = entry_at(addr, 1, 1);
    if (UNLIKELY(!e)) {
        atomic_fetch_add(&table_failures, 1);
        return 0;
    }
    atomic_store_explicit(e, size << 17 | (uint64_t)site << 1 | 1, memory_order_relaxed);
    atomic_store_explicit(e + 1, stk, memory_order_relaxed);
    return 1;
}

static inline int table_remove_st(uintptr_t addr, uint64_t *size, uint32_t *site, uint32_t *stk)
{
    _Atomic uint64_t *e = entry_at(addr, 0, 1);
    if (UNLIKELY(!e))
        return 0;
    uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
    if (UNLIKELY(!v))
        return 0;
    atomic_store_explicit(e, 0, memory_order_relaxed);
    *size = v >> 17;
    *site = (v >> 1) & 0xffff;
    *stk = (uint32_t)atomic_load_explicit(e + 1, memory_order_relaxed);
    return 1;
}

/* The fast paths without stacks (never DHAT, so entry_shift and
 * stack_word are 0, known here): one-word entries, no shift by a
 * variable and no test of stack_word per call (issue 29). */
static inline int table_insert_1(uintptr_t addr, uint64_t size, uint32_t site)
{
    _Atomic uint64_t *e = entry_at(addr, 1, 0);
    if (UNLIKELY(!e)) {
        atomic_fetch_add(&table_failures, 1);
        return 0;
    }
    atomic_store_explicit(e, size << 17 | (uint64_t)site << 1 | 1, memory_order_relaxed);
    return 1;
}

static inline int table_remove_1(uintptr_t addr, uint64_t *size, uint32_t *site)
{
    _Atomic uint64_t *e = entry_at(addr, 0, 0);
    if (UNLIKELY(!e))
        return 0;
    uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
    if (UNLIKELY(!v))
        return 0;
    atomic_store_explicit(e, 0, memory_order_relaxed);
    *size = v >> 17;
    *site = (v >> 1) & 0xffff;
    return 1;
}

/* Enter a block; 0 (counted as a table failure) if it cannot be: the
 * caller then charges nothing. */
static inline int table_insert_dh(uintptr_t addr, uint64_t size, uint32_t site, uint64_t t,
                                  uint32_t stk, int dh)
{
    _Atomic uint64_t *e = entry_of(addr, 1);
    if (UNLIKELY(!e)) {
        atomic_fetch_add(&table_failures, 1);
        return 0;
    }
    atomic_store_explicit(e, size << 17 | (uint64_t)site << 1 | 1, memory_order_relaxed);
    if (dh)
        atomic_store_explicit(e + 1, t, memory_order_relaxed);
    if (stack_word)
        atomic_store_explicit(e + stack_word, stk, memory_order_relaxed);
    return 1;
}

/* Remove addr; 1 and its size and site if it was there. */
static inline int table_remove_dh(uintptr_t addr, uint64_t *size, uint32_t *site, uint64_t *t,
                                  uint32_t *stk, int dh)
{
    _Atomic uint64_t *e = entry_of(addr, 0);
    if (UNLIKELY(!e))
        return 0;
    uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
    if (UNLIKELY(!v))
        return 0;
    atomic_store_explicit(e, 0, memory_order_relaxed);
    *size = v >> 17;
    *site = (v >> 1) & 0xffff;
    *t = dh ? atomic_load_explicit(e + 1, memory_order_relaxed) : 0;
    *stk = stack_word ? (uint32_t)atomic_load_explicit(e + stack_word, memory_order_relaxed) : 0;
    return 1;
}

/* dh: DHAT mode (dhat; the fast paths, never in DHAT mode, pass 0). */
#define table_insert(a, s, si, t, stk) table_insert_dh(a, s, si, t, stk, dhat)
#define table_remove(a, s, si, t, stk) table_remove_dh(a, s, si, t, stk, dhat)

/* ---- sampling ---------------------------------------------------------
 *
 * PROFDEV_MPROF_SAMPLE_BYTES=N (mprof --sample-bytes N): pool 1's
 * allocations are sampled by bytes, as a Poisson process of mean N: each
 * thread counts down a number of bytes drawn from an exponential
 * distribution of mean N (a per-thread xorshift64 generator, seeded from
 * PROFDEV_MPROF_SAMPLE_SEED and the thread's order, else the clock and
 * the thread's TLS address: no malloc, no lock); the allocation that
 * takes the countdown to 0 or below is sampled, and a fresh countdown
 * starts after it (the process is memoryless). An allocation of s bytes
 * is thus sampled with probability p = 1 - e^(-s/N), and a sampled one
 * is charged s/p bytes (rounded to the byte) and 1/p objects (in fixed
 * point: units of 1/2^OBJ_SHIFT, the report divides), Go's unbiased
 * weights; its free credits back the same, recomputed from its size.
 * Unsampled blocks are not in the block table: a free is first checked
 * against a counting filter of sampled addresses (sample_filter: one
 * byte per hash, stuck once it reaches 255), and only a possible sampled
 * block is looked up. crates/mprof/src/sample.rs is this algorithm in
 * Rust, which its tests drive on a seeded synthetic stream. */
#define OBJ_SHIFT 8
static uint64_t sample_n;
static double sample_nd;
static uint64_t sample_seed;
static _Atomic uint64_t sample_threads;
static __thread int64_t sample_left __attribute__((tls_model("initial-exec")));
static __thread uint64_t sample_rng __attribute__((tls_model("initial-exec")));
#define FILTER_BITS 16
static _Atomic uint8_t sample_filter[1u << FILTER_BITS];

static inline uint32_t filter_slot(const void *p)
{
    return (uint32_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> (64 - FILTER_BITS));
}

static inline int filter_maybe(const void *p)
{
    return atomic_load_explicit(&sample_filter[filter_slot(p)], memory_order_relaxed) != 0;
}

/* up: a sampled block entered (else left). A slot at 255 stays there. */
static void filter_move(const void *p, int up)
{
    _Atomic uint8_t *f = &sample_filter[filter_slot(p)];
    uint8_t v = atomic_load_explicit(f, memory_order_relaxed);
    while (v != 255 && (up || v) &&
           !atomic_compare_exchange_weak_explicit(f, &v, up ? v + 1 : v - 1, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

static inline uint64_t xorshift(uint64_t *x)
{
    uint64_t v = *x;
    v ^= v << 13;
    v ^= v >> 7;
    v ^= v << 17;
    return *x = v;
}

/* A countdown: exponential of mean N, at least 1 byte. */
static int64_t sample_draw(void)
{
    double u = ((double)(xorshift(&sample_rng) >> 11) + 0.5) * 0x1p-53; /* in (0, 1) */
    double v = -log(u) * sample_nd;
    return v < 1 ? 1 : v > 0x1p62 ? (int64_t)1 << 62 : (int64_t)v + 1;
}

static __attribute__((noinline)) int sample_cross(uint64_t n)
{
    if (UNLIKELY(!sample_rng)) { /* this thread's first allocation */
        uint64_t i = atomic_fetch_add_explicit(&sample_threads, 1, memory_order_relaxed);
        uint64_t x = sample_seed ? sample_seed + i * 0x9E3779B97F4A7C15ull
                                 : (now_us() + t0) ^ (uintptr_t)&sample_rng ^ i << 32;
        for (int r = 0; r < 4; r++)
            x = hash(x + r);
        sample_rng = x ? x : 1;
        sample_left = sample_draw() - (int64_t)n;
        if (sample_left > 0)
            return 0;
    }
    sample_left = sample_draw();
    return 1;
}

/* 1 if an allocation of n bytes is sampled (the countdown crosses 0). */
static inline int sample_hit(uint64_t n)
{
    if (LIKELY(n < SIZE_LIMIT) && LIKELY((sample_left -= (int64_t)n) > 0))
        return 0;
    return sample_cross(n);
}

/* What a block of s bytes is charged: bytes, and objects in 1/2^obj_shift
 * units (exact mode: s and 1). */
static inline void weigh(uint64_t s, int64_t *w, uint64_t *k)
{
    *w = (int64_t)s;
    *k = 1;
    if (!sample_n)
        return;
    double p = -expm1(-(double)s / sample_nd);
    if (p < 0x1p-60)
        p = 0x1p-60;
    *w = (int64_t)((double)s / p + 0.5);
    *k = (uint64_t)((double)(1u << OBJ_SHIFT) / p + 0.5);
}

/* ---- accounting ------------------------------------------------------- */

static void init(void);

struct walk {
    uintptr_t ra;
    int found;
    uintptr_t site;
    uintptr_t fp; /* the site's frame's frame pointer (rbp) */
    uintptr_t sp; /* the site frame's sp (libgcc's CFA of a context is the sp its callee returned to) */
};

static _Unwind_Reason_Code walk_cb(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (!ip)
        return _URC_END_OF_STACK;
    if (!w->found) {
        if (ip == w->ra)
            w->found = 1;
        return _URC_NO_REASON;
    }
    if (is_wrapper(ip))
        return _URC_NO_REASON;
    w->site = ip;
    w->fp = _Unwind_GetGR(ctx, 6); /* DWARF register 6: rbp */
    w->sp = _Unwind_GetCFA(ctx);
    return _URC_END_OF_STACK;
}

static uintptr_t past_wrappers(uintptr_t ra, uintptr_t *fp);

/* The site for a call whose return address is ra; *fp becomes the frame
 * pointer to walk on from (that of the site's function). By the unwind
 * tables where they cover the wrappers' frames (a cached rule each: a
 * compiler's xmalloc and C++'s operator new are called at most of its
 * allocations), else by libgcc's unwinder (which reads .eh_frame each
 * time: half of cc1's time under mprof before the tables did this). */
static uintptr_t resolve_site(uintptr_t ra, uintptr_t *fp)
{
    if (LIKELY(!is_wrapper(ra)))
        return ra;
    uintptr_t site = past_wrappers(ra, fp);
    if (site)
        return site;
    struct walk w = {ra, 0, ra, 0, 0};
    _Unwind_Backtrace(walk_cb, &w);
    *fp = w.fp;
    mprof_site_sp = w.sp; /* for unwind.c */
    return w.site;
}

/* The thread's stack (see "stacks" below). */
static __thread uintptr_t stk_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stk_hi __attribute__((tls_model("initial-exec")));

/* Each thread's plain (not wrapper) return addresses met and their
 * sites, direct-mapped: most calls skip the shared tables. 1,024 of
 * them (in the thread's memo, below): a compiler calls its allocator
 * from thousands of places (cc1: with 16, 69% of its calls missed and
 * took the slow path, issue 29). */
#define RC 1024
struct rcache {
    uintptr_t ra;
    uint32_t si;
};

/* Each thread's return addresses inside a wrapper (operator new's call
 * of malloc, a compiler's xmalloc's) whose caller, the site, one table
 * step reached, with that frame's rule, direct-mapped: the inline path
 * takes the step itself (the rule applied to this call's own frame: a
 * wrapper called from many places has one entry) and finds the site the
 * caller's return address names in the thread's rcache, where site_for
 * put it. A return address found to be a wrapper's is never a plain
 * one, nor the reverse: the same code, the same answer. */
#define WC 64
struct wcache {
    uintptr_t ra;
    uint64_t rule;
};

/* The memo of stacks: each thread's last few walks (direct-mapped by
 * return address and stack pointer), each with the words it read and
 * the stack they gave, so that a stack met before costs a compare of
 * those words, not a walk and a lookup (issue 29: stacks at most 1.3x
 * the cost of --no-stacks). Exact: a walk is a function of its start
 * (the site's return address, its stack pointer, and its frame pointer
 * if the walk used it) and of the words it reads, each read's address
 * given by the start and the words before it; the same start and the
 * same words at the same addresses give the same frames, so the same
 * stack. The addresses lie between the site's frame and the thread's
 * stack top (the walk checked them), mapped while that frame is. A walk
 * that read more than MEMO_WORDS words is not kept.
 *
 * The thread's memo holds its rcache, its wcache and its last walk too
 * (struct mprof_last, unwind.c): 29 KiB per thread
 * (mapped at its first call the inline path cannot take, given back
 * when the thread ends: a pthread key's destructor; a thread that
 * allocates after that takes the slow path), out of the static TLS a
 * dlopen'd library must fit in; a forked child keeps the forking
 * thread's, emptied (its sites and stacks were the parent's table's),
 * and the pages of the parent's other threads. */
#define MEMO_WAYS 8
#define MEMO_WORDS 28 /* at most (MPROF_WREC, a multiple of 4) */
struct memo_entry {
    uintptr_t ra, sp, fp, fpmask; /* the start; fp compared where fpmask */
    uint32_t stk, si, n, pad;     /* the stack, its site; the words read, made a multiple of 4 */
    uintptr_t zero;               /* 0: the word the count is made up with */
    /* (address, word) pairs, interleaved */
    uintptr_t w[2 * MEMO_WORDS];
    uintptr_t pad1;
};
_Static_assert(sizeof(struct memo_entry) == 512, "an entry's index is a shift");
struct memo {
    struct memo_entry e[MEMO_WAYS];
    struct rcache rc[RC];
    struct wcache wc[WC];
    struct mprof_last last; /* its last walk (unwind.c) */
};
_Static_assert(sizeof(struct memo) <= 8 * 4096, "a thread's memo is eight pages");
#define MEMO_DEAD ((struct memo *)1)
static __thread struct memo *memo_tls __attribute__((tls_model("initial-exec")));
static pthread_key_t memo_key;
static int memo_ok; /* memo_key made */

static inline struct memo_entry *memo_way(struct memo *m, uintptr_t ra, uintptr_t sp)
{
    return &m->e[((ra >> 2) ^ (sp >> 4)) & (MEMO_WAYS - 1)];
}

/* Whether the entry holds this start and its words are unchanged. */
static inline int memo_hit(const struct memo_entry *e, uintptr_t ra, uintptr_t sp, uintptr_t fp)
{
    if ((e->ra ^ ra) | (e->sp ^ sp) | ((e->fp ^ fp) & e->fpmask))
        return 0;
#define MEMO_4(w)                                                                          \
    ((*(const uintptr_t *)(w)[0] ^ (w)[1]) | (*(const uintptr_t *)(w)[2] ^ (w)[3]) |          \
     (*(const uintptr_t *)(w)[4] ^ (w)[5]) | (*(const uintptr_t *)(w)[6] ^ (w)[7]))
    const uintptr_t *w = e->w;
    uintptr_t diff = MEMO_4(w); /* n is 4 at least */
    for (const uintptr_t *end = w + 2 * e->n; (w += 8) < end;)
        diff |= MEMO_4(w);
    return !diff;
}

static void memo_gone(void *p)
{
    sys_munmap(p, sizeof(struct memo));
    memo_tls = MEMO_DEAD;
}

/* The thread's memo, mapped if it has none yet; 0 if it cannot have one
 * (the key not made, no memory, or the thread's end passed). Under busy:
 * pthread_setspecific may call calloc. */
static __attribute__((noinline)) struct memo *memo_get(void)
{
    struct memo *m = memo_tls;
    if (LIKELY(m > MEMO_DEAD))
        return m;
    if (m || !memo_ok)
        return 0;
    m = map(sizeof(struct memo));
    if (m && pthread_setspecific(memo_key, m)) {
        sys_munmap(m, sizeof(struct memo));
        m = 0;
    }
    memo_tls = m ? m : MEMO_DEAD;
    return m;
}

/* Under busy (memo_get). */
static inline uint32_t site_for(uintptr_t ra, uintptr_t *fp)
{
    struct memo *mm = memo_get();
    struct rcache *c = mm ? &mm->rc[(ra >> 2) & (RC - 1)] : 0;
    if (c && LIKELY(c->ra == ra))
        return c->si;
    if (is_wrapper(ra)) {
        uintptr_t f0 = *fp, sp0 = mprof_site_sp;
        uintptr_t site = resolve_site(ra, fp);
        uint32_t si = site_of(site);
        /* The inline path's way, tried here: the rule of ra's frame
         * alone leads from this frame to the same site, frame and
         * stack pointer. */
        uint64_t r;
        uintptr_t pc = ra, sp = sp0, f = f0;
        if (mm && si != NSITES && site && stk_hi && mprof_unwind_ready() &&
            (r = mprof_unwind_rule(ra)) && mprof_rule_step(r, &pc, &sp, &f, stk_hi) &&
            pc == site && sp == mprof_site_sp && f == *fp) {
            struct wcache *w = &mm->wc[(ra >> 2) & (WC - 1)];
            w->ra = ra;
            w->rule = r;
            c = &mm->rc[(site >> 2) & (RC - 1)];
            c->ra = site;
            c->si = si;
        }
        return si;
    }
    uint32_t si = site_of(ra);
    if (c && si != NSITES) {
        c->ra = ra;
        c->si = si;
    }
    return si;
}

/* ---- stacks: the frame-pointer walk and the stack table ---------------
 *
 * The thread's stack: [stk_lo, stk_hi), found once per thread without
 * malloc or /proc: the main thread's top is __libc_stack_end (ld.so's),
 * another thread's its descriptor (glibc puts struct pthread at the top
 * of the thread's stack, its own or one the program gave), and the low
 * end that much below it as RLIMIT_STACK says (8 MiB when unlimited).
 * A walk starts only when the current frame lies in [stk_lo, stk_hi): a
 * call on another stack (a signal's alternate stack, a coroutine's) has
 * only its site. Above the current frame and below stk_hi the thread's
 * stack is mapped, so no check-passing read can fault. */
extern void *__libc_stack_end;
/* stk_lo, stk_hi: declared above (rcache's users read them) */

static __attribute__((noinline)) void stack_bounds(void)
{
    uintptr_t size = 8 << 20, hi;
    struct rlimit r;
    if (!getrlimit(RLIMIT_STACK, &r) && r.rlim_cur != RLIM_INFINITY && r.rlim_cur >= 65536 &&
        r.rlim_cur < (1ULL << 32))
        size = r.rlim_cur;
    if (syscall(SYS_gettid) == getpid())
        hi = (uintptr_t)__libc_stack_end;
    else
        hi = (uintptr_t)pthread_self();
    stk_lo = hi > size ? hi - size : 1;
    stk_hi = hi;
}

/* The first caller past the wrappers, from the frame ra returns to, by
 * the unwind tables alone (its sp is mprof_site_sp, checked: the word
 * below it is ra, as the call pushed it); *fp and mprof_site_sp become
 * the site frame's. 0 where the tables cannot say (no tables, a frame
 * without a rule, a check failed, 16 wrappers deep). */
static uintptr_t past_wrappers(uintptr_t ra, uintptr_t *fp)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!mprof_unwind_ready())
        return 0;
    if (UNLIKELY(!stk_hi))
        stack_bounds();
    uintptr_t hi = stk_hi, sp = mprof_site_sp, f = *fp, pc = ra;
    if (here < stk_lo || here >= hi || sp < here + 8 || sp >= hi || (sp & 7) ||
        *(const uintptr_t *)(sp - 8) != ra)
        return 0;
    for (int i = 0; i < 16; i++) {
        if (!mprof_unwind_step(&pc, &sp, &f, hi))
            return 0;
        if (!is_wrapper(pc)) {
            *fp = f;
            mprof_site_sp = sp;
            return pc;
        }
    }
    return 0;
}

/* pcs[0] is the site; the callers follow from the frame pointer fp on:
 * fp[1] is its function's return address, fp[0] the caller's fp. here:
 * the current frame (the walk's lower bound). The depth; the words read
 * in rec. */
static inline int walk_fp(uintptr_t *pcs, uintptr_t fp, uintptr_t here, struct mprof_wrec *rec)
{
    if (UNLIKELY(!stk_hi))
        stack_bounds();
    uintptr_t hi = stk_hi;
    int n = 1;
    if (UNLIKELY(here < stk_lo || here >= hi))
        return n;
    if (mprof_unwind_ready()) {
        struct memo *m = memo_tls;
        return mprof_unwind_walk(pcs, MAX_DEPTH, mprof_site_sp, fp, here, hi, rec,
                                 m > MEMO_DEAD ? &m->last : 0);
    }
    uintptr_t prev = here;
    rec->fp = 1;
    while (n < MAX_DEPTH && fp > prev && !(fp & 7) && fp < hi - 16) {
        uintptr_t pc = mprof_read(rec, fp + 8);
        if (pc < 4096)
            break;
        pcs[n++] = pc;
        prev = fp;
        fp = mprof_read(rec, fp);
    }
    return n;
}

/* Keep the walk rec (from ra, sp, fp) as giving stk. Under busy: a
 * signal handler's malloc meanwhile does not use the memo. */
static __attribute__((noinline)) void memo_keep(uintptr_t ra, uintptr_t sp, uintptr_t fp,
                                                const struct mprof_wrec *rec, uint32_t stk,
                                                uint32_t si)
{
    if (((rec->n + 3) & ~3) > MEMO_WORDS || !memo_ok)
        return;
    busy = 1;
    struct memo *m = memo_get();
    if (m) {
        struct memo_entry *e = memo_way(m, ra, sp);
        e->ra = 0;
        atomic_signal_fence(memory_order_seq_cst);
        e->sp = sp;
        e->fp = fp;
        e->fpmask = rec->fp ? ~(uintptr_t)0 : 0;
        e->stk = stk;
        e->si = si;
        uint32_t n = (uint32_t)rec->n;
        for (uint32_t i = 0; i < n; i++) {
            e->w[2 * i] = rec->addr[i];
            e->w[2 * i + 1] = rec->val[i];
        }
        e->zero = 0;
        for (; (n & 3) || !n; n++) { /* a multiple of 4, 4 at least: pairs always equal */
            e->w[2 * n] = (uintptr_t)&e->zero;
            e->w[2 * n + 1] = 0;
        }
        e->n = n;
        atomic_signal_fence(memory_order_seq_cst);
        e->ra = ra;
    }
    busy = 0;
}

static inline uint64_t stack_hash(const uintptr_t *pcs, int n, uint32_t si)
{
    uint64_t h = si * 0x9e3779b97f4a7c15ULL + n;
    for (int i = 0; i < n; i++)
        h = (h ^ pcs[i]) * 0x100000001b3ULL + (h >> 29);
    h = hash(h);
    return h ? h : 1;
}

static int frame_module(uintptr_t pc)
{
    /* Most frames are in a module a site already named. */
    return module_index(pc);
}

/* A new stack in slot j (its key h already ours), or 0 (overflow). */
static __attribute__((noinline)) uint32_t stack_create(uint32_t j, const uintptr_t *pcs, int n,
                                                       uint32_t si)
{
    struct stack *st = &stacks[j];
    uint32_t f = atomic_fetch_add(&live->h_nframes, (uint32_t)n);
    if (f > NFRAMES - (uint32_t)n || !ensure(&frames[f], sizeof(struct frame) * n) ||
        !ensure(&stack_lanes[(size_t)j * NLANES], sizeof(struct stack_lane) * NLANES))
        return 0; /* st stays not ready: its key leads nowhere */
    for (int i = 0; i < n; i++) {
        frames[f + i].pc = pcs[i];
        frames[f + i].module = frame_module(pcs[i]);
    }
    st->depth = n;
    st->first = f;
    st->site = si;
    atomic_store_explicit(&st->ready, 1, memory_order_release);
    return j;
}

/* The stack of pcs[0..n) (site si): its slot, created if create (else
 * NO_STACK when new), 0 when the table is full. */
static inline uint32_t stack_of(const uintptr_t *pcs, int n, uint32_t si, int create)
{
    uint64_t h = stack_hash(pcs, n, si);
    for (unsigned i = 0; i < STACK_PROBES; i++) {
        uint32_t j = (uint32_t)((h + i) & (NSTACKS - 1));
        if (UNLIKELY(!j))
            continue; /* the overflow entry's */
        struct stack *st = &stacks[j];
        uint64_t k = atomic_load_explicit(&st->key, memory_order_acquire);
        if (k == h) {
            for (int w = 0; w < 100000 && !atomic_load_explicit(&st->ready, memory_order_acquire);
                 w++)
                __builtin_ia32_pause();
            if (!atomic_load_explicit(&st->ready, memory_order_acquire))
                continue;
            if (LIKELY(st->depth == (uint32_t)n && st->site == si)) {
                const struct frame *fr = &frames[st->first];
                int d = 0;
                while (d < n && fr[d].pc == pcs[d])
                    d++;
                if (d == n)
                    return j;
            }
            continue;
        }
        if (k)
            continue;
        if (!create)
            return NO_STACK;
        if (atomic_load(&live->h_nstacks) >= max_stacks || !ensure(st, sizeof *st))
            return 0;
        uint64_t zero = 0;
        if (atomic_compare_exchange_strong(&st->key, &zero, h)) {
            atomic_fetch_add(&live->h_nstacks, 1);
            return stack_create(j, pcs, n, si);
        }
        if (zero == h)
            i--; /* another thread's, maybe this very stack: look again */
    }
    return create ? 0 : NO_STACK;
}

/* The stack of a walk (stack_of): the last walk's, if it gave the very
 * same frames, else looked up, and kept with the thread's last walk. */
static inline uint32_t walk_stack(const struct mprof_wrec *rec, const uintptr_t *pcs, int n,
                                  uint32_t si, int create)
{
    struct memo *m = memo_tls;
    if (!rec->own || m <= MEMO_DEAD)
        return stack_of(pcs, n, si, create);
    struct mprof_last *l = &m->last;
    if (rec->same && l->stk && l->si == si)
        return l->stk;
    uint32_t stk = stack_of(pcs, n, si, create);
    l->stk = stk != NO_STACK ? stk : 0;
    l->si = si;
    return stk;
}

/* A block the sampler (if on) took: into the table and the books. */
static void account_block(void *p, uint64_t size, uintptr_t ra, uintptr_t fp)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    uint32_t si = site_for(ra, &fp);
    if (UNLIKELY(si == NSITES || size >= SIZE_LIMIT)) {
        atomic_fetch_add(&untracked_allocs, 1);
        return;
    }
    uint32_t stk = NO_STACK;
    if (stacks_on) {
        uintptr_t pcs[MAX_DEPTH];
        struct mprof_wrec rec;
        rec.n = rec.fp = rec.own = rec.same = 0;
        pcs[0] = sites[si].pc;
        int n = walk_fp(pcs, fp, here, &rec);
        stk = walk_stack(&rec, pcs, n, si, 1);
    }
    uint64_t born = dhat ? now_us() : 0;
    if (!table_insert((uintptr_t)p, size, si, born, stk))
        return;
    if (sample_n)
        filter_move(p, 1);
    int64_t w;
    uint64_t k;
    weigh(size, &w, &k);
    charge(&sites[si], w, 1, born, stk, k);
    if (UNLIKELY(!(atomic_load_explicit(&sites[si].pools, memory_order_relaxed) & POOL1)))
        atomic_fetch_or_explicit(&sites[si].pools, POOL1, memory_order_relaxed);
}

static void account_alloc(void *p, uint64_t size, uintptr_t ra, uintptr_t fp)
{
    if (temps)
        last_block = (uintptr_t)p;
    if (sample_n && !sample_hit(size))
        return;
    account_block(p, size, ra, fp);
}

/* Take p out of the books; 1 (and its size, site, stack) if it was in them.
 * Sampling: a block not sampled is no unknown free. */
static int account_free(void *p, uint64_t *size, uint32_t *si, uint64_t *t, uint32_t *stk)
{
    if (sample_n && !filter_maybe(p))
        return 0;
    if (!table_remove((uintptr_t)p, size, si, t, stk)) {
        if (!sample_n)
            atomic_fetch_add_explicit(&unknown_frees, 1, memory_order_relaxed);
        return 0;
    }
    if (sample_n)
        filter_move(p, 0);
    int64_t w;
    uint64_t k;
    weigh(*size, &w, &k);
    uint64_t temp = 0;
    if (temps && (uintptr_t)p == last_block) {
        temp = k;
        last_block = 0;
    }
    discharge(&sites[*si], w, *t, 1, stacks_on ? *stk : NO_STACK, k, temp);
    return 1;
}

/* Put back a block a failed realloc left in place (no high-water change:
 * its bytes were counted before). */
static void account_restore(void *p, uint64_t size, uint32_t si, uint64_t t, uint32_t stk)
{
    if (dhat) /* its lifetime so far was counted at the failed realloc */
        t = now_us();
    if (!table_insert((uintptr_t)p, size, si, t, stk))
        return;
    if (sample_n)
        filter_move(p, 1);
    int64_t w;
    uint64_t k;
    weigh(size, &w, &k);
    charge(&sites[si], w, 0, t, stacks_on ? stk : NO_STACK, k);
}

#define ENTER()                                                                                    \
    int track = heap && !busy;                                                                     \
    if (UNLIKELY(!inited))                                                                         \
        init(), track = heap && !busy;                                                             \
    if (track)                                                                                     \
    busy = 1
#define LEAVE()                                                                                    \
    if (track)                                                                                     \
    busy = 0

/* The caller's frame pointer, as saved by this function's prologue (the
 * exported functions keep a frame: __builtin_frame_address). */
#define CALLER_FP() caller_fp((uintptr_t)__builtin_frame_address(0))
static inline uintptr_t caller_fp(uintptr_t f)
{
    mprof_site_sp = f + 16; /* for unwind.c: the site's sp, above the return address */
    return *(const uintptr_t *)f;
}

/* A stack the memo did not have: walked, looked up (NO_STACK if new)
 * and, if the thread's last walk gave it too, kept in the memo. */
static __attribute__((noinline)) uint32_t fast_stack(uintptr_t ra, uintptr_t sp, uintptr_t fp,
                                                     uintptr_t here, uint32_t si)
{
    uintptr_t pcs[MAX_DEPTH];
    struct mprof_wrec rec;
    rec.n = rec.fp = rec.own = rec.same = 0;
    pcs[0] = ra;
    int d = walk_fp(pcs, fp, here, &rec);
    uint32_t stk = walk_stack(&rec, pcs, d, si, 0);
    /* Kept in the memo once met twice in a row (a walk is cheaper than
     * keeping it where stacks vary: cc1's). */
    if (stk != NO_STACK && (!rec.own || rec.same))
        memo_keep(ra, sp, fp, &rec, stk, si);
    return stk;
}

/* The common case, inline and without the guard's writes: counting on
 * (not DHAT), not inside the library, a return address this thread has
 * met before (so no wrapper, and its site exists) and, with stacks, a
 * stack already in the table. Nothing here can call malloc. 1 if it
 * counted the block. */
static inline __attribute__((always_inline)) int fast_alloc_in(void *p, uint64_t n, uintptr_t ra,
                                                                uintptr_t fp, uintptr_t here,
                                                                const int st)
{
    uint32_t si, stk = 0;
    struct memo *mm;
    const struct memo_entry *e;
    uintptr_t sp = here + 16; /* mprof_site_sp (CALLER_FP of malloc's frame) */
    int stepped = 0;
    if (UNLIKELY((mm = memo_tls) <= MEMO_DEAD))
        return 0; /* the slow path maps it */
again:
    if (st && LIKELY(memo_hit(e = memo_way(mm, ra, sp), ra, sp, fp)) && LIKELY(n < SIZE_LIMIT)) {
        si = e->si; /* a stack met before: its site too */
        stk = e->stk;
    } else {
        struct rcache *c = &mm->rc[(ra >> 2) & (RC - 1)];
        if (UNLIKELY(c->ra != ra || n >= SIZE_LIMIT)) {
            /* A wrapper's call met before (see wcache): one step to its
             * caller, on this thread's own stack, and the caller's site
             * (and stack) as if it had called malloc itself. */
            struct wcache *w = &mm->wc[(ra >> 2) & (WC - 1)];
            uintptr_t hi = stk_hi;
            if (stepped || w->ra != ra || n >= SIZE_LIMIT || here < stk_lo || here >= hi ||
                !mprof_rule_step(w->rule, &ra, &sp, &fp, hi))
                return 0;
            stepped = 1;
            goto again;
        }
        si = c->si;
        if (st) {
            /* The walk starts at the site's frame (mprof_site_sp), and
             * the slow path, if taken, from malloc's caller's again. */
            mprof_site_sp = sp;
            stk = fast_stack(ra, sp, fp, here, si);
            mprof_site_sp = here + 16;
            if (UNLIKELY(stk == NO_STACK))
                return 0; /* a new stack: the slow path makes it */
        }
    }
    if (UNLIKELY(!(st ? table_insert_st((uintptr_t)p, n, si, stk)
                      : table_insert_1((uintptr_t)p, n, si))))
        return 1;
    struct site *s = &sites[si];
    struct module *m = s->mod;
    int mt = !__libc_single_threaded;
    if ((!st || stk) && (mt || UNLIKELY(lanes_ever)) &&
        lane_update(s, (int64_t)n, 1, n, 1, 0, st ? stk : NO_STACK))
        return 1;
    if (mt)
        spin_raw(&m->lock);
    int open = LANES_OPEN(m);
    if (open)
        lanes_fold(m);
    int64_t v = s->c->cur + n;
    s->c->cur = v;
    if (v > s->c->hw)
        s->c->hw = v;
    s->c->nalloc++;
    s->c->bytes += n;
    s->c->nlive++;
    v = m->cur + n;
    m->cur = v;
    if (v > m->hw)
        m->hw = v;
    if (st) {
        /* Never the overflow entry here (fast_stack never gives it). */
        struct stack *k = &stacks[stk];
        k->nalloc++;
        k->bytes += n;
        k->nlive++;
        k->cur += (int64_t)n;
    }
    if (open)
        lanes_locked(m);
    if (mt)
        unspin(&m->lock);
    return 1;
}

static inline __attribute__((always_inline)) void fast_free_in(void *p, const int st)
{
    uint64_t size;
    uint32_t si, stk = 0;
    if (UNLIKELY(!(st ? table_remove_st((uintptr_t)p, &size, &si, &stk)
                      : table_remove_1((uintptr_t)p, &size, &si)))) {
        atomic_fetch_add_explicit(&unknown_frees, 1, memory_order_relaxed);
        return;
    }
    struct site *s = &sites[si];
    struct module *m = s->mod;
    uint64_t temp = temps && (uintptr_t)p == last_block;
    if (UNLIKELY(temp))
        last_block = 0;
    int mt = !__libc_single_threaded;
    if ((!st || stk) && (mt || UNLIKELY(lanes_ever)) &&
        lane_update(s, -(int64_t)size, 0, 0, -1, temp, st ? stk : NO_STACK))
        return;
    if (mt)
        spin_raw(&m->lock);
    int open = LANES_OPEN(m);
    if (open)
        lanes_fold(m);
    /* The block's bytes are in both (charged when it was entered). */
    s->c->cur -= (int64_t)size;
    m->cur -= (int64_t)size;
    s->c->nlive--;
    if (UNLIKELY(temp))
        s->ntemp++;
    if (st)
        stack_sub(stk, size, 1, temp);
    if (open)
        lanes_locked(m);
    if (mt)
        unspin(&m->lock);
}

/* Each mode its own copy (st a constant): with stacks or without. */
static inline __attribute__((always_inline)) int fast_alloc(void *p, uint64_t n, uintptr_t ra,
                                                             uintptr_t fp, uintptr_t here)
{
    return stacks_on ? fast_alloc_in(p, n, ra, fp, here, 1) : fast_alloc_in(p, n, ra, fp, here, 0);
}

static inline __attribute__((always_inline)) void fast_free(void *p)
{
    if (stacks_on)
        fast_free_in(p, 1);
    else
        fast_free_in(p, 0);
}

/* Sampling, past malloc's countdown test: the countdown crosses 0 (or the
 * block is past SIZE_LIMIT, or --temporary notes it). */
static __attribute__((noinline)) void *malloc_sampled(size_t n, uintptr_t ra, uintptr_t fp)
{
    void *p = __libc_malloc(n);
    if (UNLIKELY(temps))
        last_block = (uintptr_t)p;
    if (UNLIKELY(!p) || LIKELY(!sample_hit(n)))
        return p;
    busy = 1;
    account_block(p, n, ra, fp);
    busy = 0;
    return p;
}

/* Sampling: free of a block the filter says may be a sampled one. */
static __attribute__((noinline)) void free_sampled(void *p)
{
    uint64_t size, t;
    uint32_t si, stk;
    busy = 1;
    account_free(p, &size, &si, &t, &stk);
    busy = 0;
    __libc_free(p);
}

static void *malloc_guarded(size_t n, uintptr_t ra, uintptr_t fp);

/* malloc counting every block (not sampling). ra, fp: malloc's caller's
 * return address and frame pointer; here: malloc's frame. */
static __attribute__((noinline)) void *malloc_exact(size_t n, uintptr_t ra, uintptr_t fp,
                                                    uintptr_t here)
{
    if (LIKELY(fast) && LIKELY(!busy)) {
        void *p = __libc_malloc(n);
        if (UNLIKELY(temps))
            last_block = (uintptr_t)p;
        if (UNLIKELY(!p) || LIKELY(fast_alloc(p, n, ra, fp, here)))
            return p;
        busy = 1;
        account_alloc(p, n, ra, fp);
        busy = 0;
        return p;
    }
    return malloc_guarded(n, ra, fp);
}

/* Sampling: between samples only the countdown, then the C library's
 * malloc as a tail call (the countdown is charged before the call, a
 * failed malloc's too). Everything else is in functions of its own, so
 * that this path saves no register and makes no frame but malloc's frame
 * pointer (the exact path's is one call more). */
EXPORT void *malloc(size_t n)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    if (sample_n) {
        if (LIKELY(fast) && LIKELY(!busy)) {
            int64_t left = sample_left - (int64_t)n;
            if (LIKELY(n < SIZE_LIMIT) && LIKELY(left > 0) && LIKELY(!temps)) {
                sample_left = left;
                return __libc_malloc(n);
            }
            return malloc_sampled(n, ra, CALLER_FP());
        }
        return malloc_guarded(n, ra, CALLER_FP());
    }
    return malloc_exact(n, ra, CALLER_FP(), (uintptr_t)__builtin_frame_address(0));
}

/* malloc inside the library, before init, or not counting. */
static __attribute__((noinline)) void *malloc_guarded(size_t n, uintptr_t ra, uintptr_t fp)
{
    ENTER();
    void *p = __libc_malloc(n);
    if (track && p)
        account_alloc(p, n, ra, fp);
    else if (p && heap)
        atomic_fetch_add_explicit(&untracked_allocs, 1, memory_order_relaxed);
    LEAVE();
    return p;
}

static void free_guarded(void *p);

/* free counting every block (not sampling). */
static __attribute__((noinline)) void free_exact(void *p)
{
    if (LIKELY(fast) && LIKELY(!busy)) {
        fast_free(p);
        __libc_free(p);
        return;
    }
    free_guarded(p);
}

/* Sampling: the filter, then the C library's free as a tail call; the
 * rest in functions of their own (no register saved on this path). */
EXPORT void free(void *p)
{
    if (!p)
        return;
    if (!sample_n)
        free_exact(p);
    else if (UNLIKELY(!fast) || UNLIKELY(busy))
        free_guarded(p);
    else if (UNLIKELY(filter_maybe(p)))
        free_sampled(p);
    else
        __libc_free(p);
}

/* free inside the library, before init, or not counting. */
static __attribute__((noinline)) void free_guarded(void *p)
{
    ENTER();
    uint64_t size, t;
    uint32_t si, stk;
    if (track)
        account_free(p, &size, &si, &t, &stk);
    __libc_free(p);
    LEAVE();
}

EXPORT void *calloc(size_t a, size_t b)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    if (sample_n && LIKELY(fast) && LIKELY(!busy) && LIKELY(!temps)) {
        /* Sampling: as malloc's, between samples only the countdown. */
        uint64_t n = (uint64_t)a * b;
        int64_t left = sample_left - (int64_t)n;
        if (LIKELY((a | b) < (1u << 31)) && LIKELY(n < SIZE_LIMIT) && LIKELY(left > 0)) {
            sample_left = left;
            return __libc_calloc(a, b);
        }
    }
    ENTER();
    void *p = __libc_calloc(a, b);
    if (track && p)
        account_alloc(p, (uint64_t)a * b, ra, CALLER_FP());
    LEAVE();
    return p;
}

static void *realloc_at(void *old, size_t n, uintptr_t ra, uintptr_t fp)
{
    ENTER();
    uint64_t size = 0, t = 0;
    uint32_t si = 0, stk = 0;
    int had = track && old && account_free(old, &size, &si, &t, &stk);
    void *p = __libc_realloc(old, n);
    if (track) {
        if (p)
            account_alloc(p, n, ra, fp);
        else if (old && n && had)
            account_restore(old, size, si, t, stk); /* failed: the old block stays */
    }
    LEAVE();
    return p;
}

EXPORT void *realloc(void *old, size_t n)
{
    return realloc_at(old, n, (uintptr_t)__builtin_return_address(0), CALLER_FP());
}

EXPORT void *reallocarray(void *old, size_t a, size_t b)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return 0;
    }
    return realloc_at(old, n, ra, CALLER_FP());
}

static void *aligned_at(size_t align, size_t n, uintptr_t ra, uintptr_t fp)
{
    ENTER();
    void *p = __libc_memalign(align, n);
    if (track && p)
        account_alloc(p, n, ra, fp);
    LEAVE();
    return p;
}

EXPORT void *memalign(size_t align, size_t n)
{
    return aligned_at(align, n, (uintptr_t)__builtin_return_address(0), CALLER_FP());
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return aligned_at(align, n, (uintptr_t)__builtin_return_address(0), CALLER_FP());
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    void *p = aligned_at(align, n, ra, CALLER_FP());
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *valloc(size_t n)
{
    return aligned_at(sysconf(_SC_PAGESIZE), n, (uintptr_t)__builtin_return_address(0),
                      CALLER_FP());
}

EXPORT void *pvalloc(size_t n)
{
    size_t pg = sysconf(_SC_PAGESIZE);
    return aligned_at(pg, (n + pg - 1) & ~(pg - 1), (uintptr_t)__builtin_return_address(0),
                      CALLER_FP());
}

/* ---- pools 2 and 3: mappings the program makes itself ----------------- */

/* Pool 2 is anonymous memory the program maps (mmap with MAP_ANONYMOUS,
 * mremap) or takes from the break (brk, sbrk); pool 3 is file-backed
 * mappings (mmap of a file descriptor). Only calls through the exported
 * symbols are seen: glibc's malloc maps and extends its heaps through its
 * internal __mmap, __mremap, __munmap and __sbrk, which do not go through
 * the PLT, so nothing the allocator does is counted twice. A mapping is
 * charged to the site of its call (its length rounded up to whole pages;
 * the break in bytes, as sbrk takes them); munmap credits the bytes it
 * removes, also from part of a mapping (the rest stays charged); a
 * MAP_FIXED mapping over a counted one credits the pages it replaces;
 * mremap is a removal of the old range and a mapping at its own site. The
 * regions live in one table, sorted by nothing, under one mutex held
 * across the system call, so that a range unmapped by one thread and
 * mapped again by another is accounted in the kernel's order. */
static int pools = POOL1;
struct region {
    uintptr_t lo, hi;
    uint32_t site, pool;
    uint64_t born;
};
static struct region *regions;
static uint32_t nregions, regcap;
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;

static uintptr_t page_up(uintptr_t n)
{
    uintptr_t pg = 4096;
    return (n + pg - 1) & ~(pg - 1);
}

/* A mapping split in two by an unmapping: one more piece live. */
static void split_piece(struct site *s, uint64_t born)
{
    struct module *m = module_of_site(s);
    atomic_flag *l = global ? &global_lock : &m->lock;
    spin(l);
    if (peak)
        peak_keep(s, NO_STACK);
    s->c->nlive++;
    if (dhat) {
        s->curbk++;
        s->sumborn += born;
    }
    unspin(l);
}

/* Credit [lo, hi) of every region it overlaps; keep their other parts. */
static void region_cut(uintptr_t lo, uintptr_t hi)
{
    for (uint32_t i = 0; i < nregions;) {
        struct region *r = &regions[i];
        if (r->hi <= lo || r->lo >= hi) {
            i++;
            continue;
        }
        uintptr_t a = r->lo > lo ? r->lo : lo, b = r->hi < hi ? r->hi : hi;
        int left = r->lo < lo, right = r->hi > hi;
        struct site *s = &sites[r->site];
        discharge(s, b - a, r->born, !left && !right, NO_STACK, 1, 0);
        if (left && right) {
            if (nregions < regcap) { /* split: the right part is a region of its own */
                regions[nregions] = *r;
                regions[nregions].lo = hi;
                nregions++;
                split_piece(s, r->born);
            } else { /* no room: credit the right part too */
                discharge(s, r->hi - hi, r->born, 0, NO_STACK, 1, 0);
            }
            r->hi = lo;
            i++;
        } else if (left) {
            r->hi = lo;
            i++;
        } else if (right) {
            r->lo = hi;
            i++;
        } else {
            *r = regions[--nregions];
        }
    }
}

static void region_add(uintptr_t lo, uintptr_t hi, uintptr_t ra, uint32_t pool)
{
    if (nregions == regcap) {
        uint32_t ncap = regcap ? regcap * 2 : 256;
        struct region *n = map((size_t)ncap * sizeof *n);
        if (!n) {
            atomic_fetch_add(&table_failures, 1);
            return;
        }
        if (regions) {
            memcpy(n, regions, (size_t)nregions * sizeof *n);
            sys_munmap(regions, (size_t)regcap * sizeof *n);
        }
        regions = n;
        regcap = ncap;
    }
    uintptr_t fp = 0;
    uint32_t si = site_for(ra, &fp);
    if (si == NSITES || hi - lo >= SIZE_LIMIT) {
        atomic_fetch_add(&untracked_allocs, 1);
        return;
    }
    uint64_t born = dhat ? now_us() : 0;
    charge(&sites[si], hi - lo, 1, born, NO_STACK, 1);
    atomic_fetch_or_explicit(&sites[si].pools, pool, memory_order_relaxed);
    regions[nregions++] = (struct region){lo, hi, si, pool, born};
}

/* Whether mapping calls are counted now; if so the caller holds
 * region_lock and busy is set: undo with map_leave. */
static int map_enter(void)
{
    if (UNLIKELY(!inited))
        init();
    if (!enabled || busy || !(pools & (POOL2 | POOL3)))
        return 0;
    busy = 1;
    pthread_mutex_lock(&region_lock);
    return 1;
}

static void map_leave(void)
{
    pthread_mutex_unlock(&region_lock);
    busy = 0;
}

static void *mmap_at(void *a, size_t n, int prot, int flags, int fd, off_t off, uintptr_t ra)
{
    if (!map_enter())
        return sys_mmap(a, n, prot, flags, fd, off);
    int saved = errno;
    void *p = sys_mmap(a, n, prot, flags, fd, off);
    if (p != MAP_FAILED) {
        uint32_t pool = (flags & MAP_ANONYMOUS) ? POOL2 : POOL3;
        region_cut((uintptr_t)p, (uintptr_t)p + page_up(n));
        if (pools & pool)
            region_add((uintptr_t)p, (uintptr_t)p + page_up(n), ra, pool);
        errno = saved;
    }
    map_leave();
    return p;
}

EXPORT void *mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
    return mmap_at(a, n, prot, flags, fd, off, (uintptr_t)__builtin_return_address(0));
}

EXPORT void *mmap64(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
    return mmap_at(a, n, prot, flags, fd, off, (uintptr_t)__builtin_return_address(0));
}

EXPORT int munmap(void *a, size_t n)
{
    if (!map_enter())
        return sys_munmap(a, n);
    int r = sys_munmap(a, n);
    if (r == 0)
        region_cut((uintptr_t)a, (uintptr_t)a + page_up(n));
    int e = errno;
    map_leave();
    errno = e;
    return r;
}

EXPORT void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    void *want = 0;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    if (!map_enter())
        return (void *)syscall(SYS_mremap, old, old_size, new_size, flags, want);
    void *p = (void *)syscall(SYS_mremap, old, old_size, new_size, flags, want);
    int e = errno;
    if (p != MAP_FAILED) {
        /* The old range's pool; a range never counted is anonymous. */
        uint32_t pool = POOL2;
        for (uint32_t i = 0; i < nregions; i++)
            if (regions[i].lo < (uintptr_t)old + old_size && regions[i].hi > (uintptr_t)old) {
                pool = regions[i].pool;
                break;
            }
        if (!(flags & MREMAP_DONTUNMAP) || p == old)
            region_cut((uintptr_t)old, (uintptr_t)old + page_up(old_size));
        region_cut((uintptr_t)p, (uintptr_t)p + page_up(new_size));
        if (pools & pool)
            region_add((uintptr_t)p, (uintptr_t)p + page_up(new_size), ra, pool);
    }
    map_leave();
    errno = e;
    return p;
}

/* The break moved from old by incr (both already done). */
static void break_moved(uintptr_t old, intptr_t incr, uintptr_t ra)
{
    if (incr > 0 && (pools & POOL2))
        region_add(old, old + incr, ra, POOL2);
    else if (incr < 0)
        region_cut(old + incr, old);
}

EXPORT void *sbrk(intptr_t incr)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    if (!map_enter())
        return __sbrk(incr);
    void *old = __sbrk(incr);
    int e = errno;
    if (old != (void *)-1)
        break_moved((uintptr_t)old, incr, ra);
    map_leave();
    errno = e;
    return old;
}

EXPORT int brk(void *addr)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    int counted = map_enter();
    if (!__curbrk)
        __sbrk(0);
    uintptr_t old = (uintptr_t)__curbrk;
    intptr_t incr = (intptr_t)((uintptr_t)addr - old);
    int r = __sbrk(incr) == (void *)-1 ? -1 : 0;
    if (counted) {
        int e = errno;
        if (r == 0)
            break_moved(old, incr, ra);
        map_leave();
        errno = e;
    }
    return r;
}

/* ---- the shared table's area ------------------------------------------ */


/* A new file PREFIX.PID.K in the report directory (K the first free
 * number), O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600; its descriptor (-1 if
 * none), its path in path (sizeof live_path) and K in *kp. */
static int create_out(const char *prefix, char *path, uint32_t *kp, int flags)
{
    pid_t pid = getpid();
    for (uint32_t k = 0; k < 1000; k++) {
        size_t l = strlen(outdir);
        memcpy(path, outdir, l);
        path[l++] = '/';
        size_t pl = strlen(prefix);
        memcpy(path + l, prefix, pl);
        l += pl;
        path[l++] = '.';
        char num[64];
        int i = sizeof num;
        num[--i] = 0;
        uint64_t v = k;
        do
            num[--i] = '0' + v % 10, v /= 10;
        while (v);
        num[--i] = '.';
        v = pid;
        do
            num[--i] = '0' + v % 10, v /= 10;
        while (v);
        strcpy(path + l, num + i);
        int fd = open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            *kp = k;
            return fd;
        }
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* Point the tables into the area a. */
static void use_area(char *a)
{
    area_base = a;
    live = (struct live_header *)a;
    modules = (struct module *)(a + MODULES_OFF);
    used = (uint32_t *)(a + USED_OFF);
    sites = (struct site *)(a + SITES_OFF);
    stacks = (struct stack *)(a + STACKS_OFF);
    frames = (struct frame *)(a + FRAMES_OFF);
    stack_lanes = (struct stack_lane *)(a + STACK_LANES_OFF);
}

/* A fresh, empty area for the tables: a shared mapping of live.PID.K in
 * the report directory if there is one (its path in live_path), else
 * anonymous memory; 0 if neither can be had. */
static char *new_area(void)
{
    char *a = 0;
    live_path[0] = 0;
    if (live_fd >= 0) /* the previous area's (after fork: the parent's) */
        close(live_fd);
    live_fd = -1;
    for (size_t i = 0; i < sizeof page_ok / sizeof page_ok[0]; i++)
        atomic_store(&page_ok[i], 0);
    if (outdir[0]) {
        char path[sizeof live_path];
        uint32_t k;
        int fd = create_out("live", path, &k, O_RDWR);
        if (fd >= 0) {
            struct stat st;
            if (!ftruncate(fd, AREA_SIZE) && !fstat(fd, &st)) {
                char *p = sys_mmap(0, AREA_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p != MAP_FAILED) {
                    area_base = p;
                    live_fd = fd;
                    live_dev = st.st_dev;
                    live_ino = st.st_ino;
                    /* Blocks now for the header and the slot of sites in
                     * no module; none to be had: no file at all. */
                    if (ensure(p, 4096) &&
                        ensure(p + MODULES_OFF + MAX_MODULES * sizeof(struct module),
                               sizeof(struct module)) &&
                        ensure(p + STACKS_OFF, sizeof(struct stack))) {
                        a = p;
                        strcpy(live_path, path);
                    } else {
                        sys_munmap(p, AREA_SIZE);
                        live_fd = -1;
                    }
                }
            }
            if (!a) {
                close(fd);
                unlink(path);
            }
        }
    }
    if (!a) {
        a = map(AREA_SIZE);
        area_base = a;
    }
    if (!a)
        return 0;
    struct live_header *h = (struct live_header *)a;
    h->header_size = sizeof *h;
    h->obj_shift = sample_n ? OBJ_SHIFT : 0;
    h->pid = getpid();
    h->total_size = AREA_SIZE;
    h->modules_off = MODULES_OFF;
    h->used_off = USED_OFF;
    h->sites_off = SITES_OFF;
    h->max_modules = MAX_MODULES + 1;
    h->nsites = NSITES;
    h->module_size = sizeof(struct module);
    h->site_size = sizeof(struct site);
    h->m_l_addr = offsetof(struct module, l_addr);
    h->m_path = offsetof(struct module, path);
    h->m_path_size = sizeof(((struct module *)0)->path);
    h->m_dev = offsetof(struct module, dev);
    h->m_ino = offsetof(struct module, ino);
    h->m_cur = offsetof(struct module, cur);
    h->m_hw = offsetof(struct module, hw);
    h->m_resident = offsetof(struct module, resident);
    h->s_pc = offsetof(struct site, pc);
    h->s_module = offsetof(struct site, module);
    h->s_pools = offsetof(struct site, pools);
    h->s_resident = offsetof(struct site, resident);
    h->s_own = offsetof(struct site, own);
    h->counters_size = sizeof(struct counters);
    h->s_lanes = offsetof(struct site, lanes);
    h->nlanes = NLANES;
    h->lane_size = sizeof(struct lane);
    h->stacks_off = STACKS_OFF;
    h->frames_off = FRAMES_OFF;
    h->nstacks = NSTACKS;
    h->nframes = NFRAMES;
    h->stack_size = sizeof(struct stack);
    h->frame_size = sizeof(struct frame);
    h->stack_lanes_off = STACK_LANES_OFF;
    h->stack_lane_size = sizeof(struct stack_lane);
    h->h_nstacks = 1; /* the overflow entry */
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, "profdev-mlive 1", 16);
    return a;
}

/* ---- fork, init, report ----------------------------------------------- */

/* Whether this thread's fork took the locks: none are taken once counting
 * stopped (detached); a detach between the two halves of a fork finds
 * them taken and lets them go. */
static __thread int fork_locked __attribute__((tls_model("initial-exec")));

static void before_fork(void)
{
    fork_locked = enabled;
    if (!fork_locked)
        return;
    pthread_mutex_lock(&region_lock);
    pthread_mutex_lock(&module_lock);
    mprof_scan_lock(1);
    for (int i = 0; i < nmodules; i++)
        spin(&modules[i].lock);
    spin(&nomodule.lock);
    spin(&global_lock);
}

static void after_fork_parent(void)
{
    if (!fork_locked)
        return;
    unspin(&global_lock);
    unspin(&nomodule.lock);
    for (int i = 0; i < nmodules; i++)
        unspin(&modules[i].lock);
    mprof_scan_lock(0);
    pthread_mutex_unlock(&module_lock);
    pthread_mutex_unlock(&region_lock);
}

static void after_fork_child(void)
{
    if (!fork_locked)
        return;
    if (!enabled) { /* stopped (detached) since: the child counts nothing either */
        after_fork_parent();
        return;
    }
    /* The child starts from zero: empty tables and counters, in a table
     * of its own (the parent's area is shared with the parent). */
    uint32_t nl = atomic_load(&nleaves);
    if (nl <= MAX_LEAVES) {
        for (uint32_t k = 0; k < nl; k++) {
            sys_munmap((void *)top[leaves[k]], leaf_bytes());
            top[leaves[k]] = 0;
        }
    } else { /* more leaves than the list holds: look at every pointer */
        for (uint32_t t = 0; t < TOP_SLOTS; t++)
            if (top[t]) {
                sys_munmap((void *)top[t], leaf_bytes());
                top[t] = 0;
            }
    }
    nleaves = 0;
    /* The other threads' lanes are free; this one takes one again. */
    atomic_store(&lanes_taken, 0);
    lane_tls = 0;
    if (memo_tls > MEMO_DEAD) /* sites and stacks of the parent's table */
        memset(memo_tls, 0, sizeof *memo_tls);
    if (sample_n) /* no sampled block is in the child's books */
        memset((void *)sample_filter, 0, sizeof sample_filter);
    char *old = (char *)live;
    int n = nmodules;
    char *fresh = new_area();
    if (fresh) {
        struct module *fm = (struct module *)(fresh + MODULES_OFF);
        if (n > 0 && !ensure(fm, sizeof(struct module) * n))
            n = 0; /* no room for them: found again as they are met */
        memcpy(fm, modules, sizeof(struct module) * n);
        for (int i = 0; i < n; i++) {
            fm[i].cur = fm[i].hw = 0;
            memset(&fm[i].resident, 0, sizeof fm[i].resident);
            fm[i].nopen = fm[i].nolanes = fm[i].nlocked = 0; /* the parent's lanes */
            atomic_store(&fm[i].resident_taken, 0);
            atomic_flag_clear(&fm[i].lock);
        }
        ((struct live_header *)fresh)->h_nmodules = n;
        /* In place of the parent's, at the same address (sites point at
         * their module). */
        void *p = (void *)syscall(SYS_mremap, fresh, AREA_SIZE, AREA_SIZE,
                                  MREMAP_MAYMOVE | MREMAP_FIXED, old);
        if (p == MAP_FAILED) {
            enabled = heap = fast = 0; /* no table: count nothing rather than the parent's */
            sys_munmap(fresh, AREA_SIZE);
        } else
            use_area(old);
    } else
        enabled = heap = fast = 0;
    gcur = ghw = 0;
    peak_pending = 0;
    peak_epoch = 0;
    tg = 0;
    if (dhat)
        t0 += now_us(); /* the child's times start at its fork */
    atomic_flag_clear(&global_lock);
    nregions = 0; /* inherited mappings are not the child's */
    mprof_scan_lock(0);
    pthread_mutex_unlock(&module_lock);
    pthread_mutex_unlock(&region_lock);
}

static void init(void)
{
    if (inited)
        return;
    inited = 1;
    busy = 1;
    const char *d = getenv("PROFDEV_MPROF_DIR");
    const char *w = getenv("PROFDEV_MPROF_WRAPPERS");
    outdir[0] = 0;
    if (d && d[0] && strlen(d) < sizeof outdir - 64)
        strcpy(outdir, d);
    char *area = new_area();
    if (area)
        use_area(area);
    cls = map(sizeof(struct cls) * NCLS);
    /* PROFDEV_MPROF_POOLS: the digits of startmp (1, 2, 3); pool 1 alone
     * when unset. */
    const char *pl = getenv("PROFDEV_MPROF_POOLS");
    if (pl && pl[0]) {
        pools = 0;
        for (; *pl; pl++)
            if (*pl >= '1' && *pl <= '3')
                pools |= 1 << (*pl - '1');
    }
    /* PROFDEV_MPROF_SAMPLE_BYTES=N: sampling (see "sampling"); not with DHAT. */
    const char *sb = getenv("PROFDEV_MPROF_SAMPLE_BYTES");
    const char *ss = getenv("PROFDEV_MPROF_SAMPLE_SEED");
    sample_n = sample_seed = 0;
    for (const char *q = sb; q && *q >= '0' && *q <= '9' && sample_n < (1ull << 40); q++)
        sample_n = sample_n * 10 + (*q - '0');
    for (const char *q = ss; q && *q >= '0' && *q <= '9'; q++)
        sample_seed = sample_seed * 10 + (*q - '0');
    sample_nd = (double)sample_n;
    live->obj_shift = sample_n ? OBJ_SHIFT : 0;
    const char *dh = getenv("PROFDEV_MPROF_DHAT");
    dhat = dh && dh[0] == '1' && !sample_n;
    const char *pk = getenv("PROFDEV_MPROF_PEAK");
    peak = pk && pk[0] == '1' && !sample_n;
    const char *tp = getenv("PROFDEV_MPROF_TEMPORARY");
    temps = tp && tp[0] == '1';
    global = dhat || peak;
    if (dhat) {
        t0 = 0;
        t0 = now_us();
    }
    int ranges = mprof_wrappers_init(w, getenv("PROFDEV_MPROF_SYSTEM"));
    /* PROFDEV_MPROF_STACKS=1: whole stacks (pool 1); =1,N keeps at most
     * N stacks (tests of the overflow entry). */
    const char *sk = getenv("PROFDEV_MPROF_STACKS");
    stacks_on = sk && sk[0] == '1' && (pools & POOL1);
    max_stacks = NSTACKS - NSTACKS / 4;
    if (stacks_on && sk[1] == ',') {
        uint32_t v = 0;
        for (const char *q = sk + 2; *q >= '0' && *q <= '9' && v < NSTACKS; q++)
            v = v * 10 + (*q - '0');
        if (v >= 1 && v < max_stacks)
            max_stacks = v + 1; /* and the overflow entry */
    }
    if (!memo_ok)
        memo_ok = !pthread_key_create(&memo_key, memo_gone);
    if (!lane_key_ok)
        lane_key_ok = !pthread_key_create(&lane_key, lane_gone);
    entry_shift = stacks_on ? (dhat ? 2 : 1) : (dhat ? 1 : 0);
    stack_word = stacks_on ? (dhat ? 2 : 1) : 0;
    top = map_noreserve(sizeof(*top) * TOP_SLOTS);
    if (outdir[0] && area && cls && ranges && top) {
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        enabled = 1;
        heap = (pools & POOL1) != 0;
        fast = heap && !global;
    }
    busy = 0;
}

/* Whether this library came with the program (LD_PRELOAD, or a program
 * linked with it) rather than dlopen'd into it while it ran (attach.c):
 * the loader keeps its objects in the order it loaded them, and the C
 * library, which this one needs, comes after it only when both were
 * loaded at the program's start. */
static int came_with_program(void)
{
    Dl_info di;
    struct link_map *self = 0;
    if (!dladdr1((void *)came_with_program, &di, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return 1;
    for (const struct link_map *l = self->l_prev; l; l = l->l_prev) {
        const char *n = l->l_name ? l->l_name : "";
        const char *b = strrchr(n, '/');
        b = b ? b + 1 : n;
        if (!strncmp(b, "libc.so", 7) || !strncmp(b, "libc-", 5))
            return 0;
    }
    return 1;
}

/* Preloaded: counting starts here, with the environment's settings.
 * dlopen'd by an attach: nothing yet (the process's environment is not
 * the settings, and its tables would be mapped for nothing: 40 MiB of
 * address space the leak scan would read as roots); attach.c's
 * profdev_mprof_attach starts it once, with its config
 * (mprof_attach_start). */
__attribute__((constructor)) static void ctor(void)
{
    if (came_with_program())
        init();
    else
        inited = 1; /* counting nothing until mprof_attach_start */
}

/* attach.c: start counting in a process that loaded this library while it
 * ran, now that mprof_getenv has the settings: the one init() (the
 * constructor did nothing). */
int mprof_attach_start(void)
{
    if (area_base) /* started already (it came with the program): never twice */
        return enabled;
    inited = 0;
    init();
    return enabled;
}

/* The report goes through the runtimes' one async-signal-safe output
 * buffer (sigsafe_out.h, from profdev-cbuild); mprof's hexadecimal
 * numbers carry 0x. */
static void put(struct sigsafe_out *o, const char *s)
{
    sigsafe_puts(o, s);
}

static void put_u(struct sigsafe_out *o, uint64_t v, int base)
{
    if (base == 16)
        sigsafe_puts(o, "0x");
    sigsafe_putu(o, v, base);
}

/* A count of objects, in units of 1/2^obj_shift when sampling. */
static void put_k(struct sigsafe_out *o, uint64_t v)
{
    put_u(o, sample_n ? (v + (1u << (OBJ_SHIFT - 1))) >> OBJ_SHIFT : v, 10);
}

static void put_i(struct sigsafe_out *o, int64_t v)
{
    sigsafe_puti(o, v);
}

/* --peak: a site's or stack's part of the global peak, when it has one. */
static void put_at_peak(struct sigsafe_out *o, int64_t bytes, uint64_t blocks)
{
    if (bytes <= 0 && !blocks)
        return;
    put(o, "atpeak ");
    put_i(o, bytes);
    put(o, " ");
    put_k(o, blocks);
    put(o, "\n");
}

/* The bytes s's lanes hold, not yet folded. */
static int64_t site_delta(struct site *s)
{
    int64_t d = 0;
    for (int l = 0; l < NLANES; l++)
        d += (int32_t)(uint32_t)atomic_load_explicit(&s->lanes[l].word, memory_order_relaxed);
    return d;
}

/* Write the report: mprof.<pid>.<k>, O_EXCL|O_NOFOLLOW, 0600. final: the
 * exit's, after which the shared table is no longer the report. */
static void report(int final)
{
    char path[sizeof live_path];
    uint32_t k;
    pid_t pid = getpid();
    int fd = create_out("mprof", path, &k, O_WRONLY);
    if (fd < 0)
        return;
    if (final) {
        atomic_store(&live->report_k, k);
        atomic_store(&live->state, LIVE_WRITING);
    }
    static char obuf[8192];
    struct sigsafe_out o = SIGSAFE_OUT(fd, obuf);
    put(&o, "profdev-mprof 1\npid ");
    put_u(&o, pid, 10);
    put(&o, "\n");
    if (global) {
        spin(&global_lock);
        if (peak_pending)
            peak_passed();
        unspin(&global_lock);
    }
    if (peak) {
        put(&o, "peak ");
        put_i(&o, ghw);
        put(&o, "\n");
    }
    if (dhat) {
        put(&o, "dhat ");
        put_u(&o, now_us(), 10);
        put(&o, " ");
        put_u(&o, tg, 10);
        put(&o, "\n");
    }
    int n = atomic_load(&nmodules);
    /* The lanes' deltas, added to the bytes as read (no lock: a report
     * reads the table as the threads go on, and one made in a signal
     * handler must not wait for a lock its thread holds). */
    static int64_t mdelta[MAX_MODULES + 1];
    memset(mdelta, 0, sizeof mdelta);
    uint32_t nu = atomic_load(&nused);
    for (uint32_t u = 0; lanes_ever && u < nu && u < NSITES; u++) {
        if (!page_known(&used[u]))
            continue;
        struct site *s = &sites[used[u]];
        if (s->mod)
            mdelta[s->mod - modules] += site_delta(s);
    }
    for (int i = 0; i < n; i++) {
        struct module *m = &modules[i];
        put(&o, "module ");
        put_u(&o, i, 10);
        put(&o, " ");
        put_u(&o, m->l_addr, 16);
        put(&o, " ");
        put_u(&o, m->dev, 10);
        put(&o, " ");
        put_u(&o, m->ino, 10);
        put(&o, " ");
        put_i(&o, m->cur + mdelta[i]);
        put(&o, " ");
        put_i(&o, m->hw);
        put(&o, " ");
        put(&o, m->path);
        put(&o, "\n");
    }
    uint64_t end = dhat ? now_us() : 0;
    for (uint32_t u = 0; u < nu && u < NSITES; u++) {
        if (!page_known(&used[u]))
            continue;
        struct site *s = &sites[used[u]];
        if (!s->pc || !s->c)
            continue;
        /* Its lanes' counts and bytes. */
        uint64_t nalloc = s->c->nalloc, bytes = s->c->bytes, nlive = s->c->nlive,
                 ntemp = s->ntemp;
        for (int l = 0; lanes_ever && l < NLANES; l++) {
            nalloc += atomic_load_explicit(&s->lanes[l].nalloc, memory_order_relaxed);
            bytes += atomic_load_explicit(&s->lanes[l].bytes, memory_order_relaxed);
            nlive += atomic_load_explicit(&s->lanes[l].nlive, memory_order_relaxed);
            ntemp += atomic_load_explicit(&s->lanes[l].ntemp, memory_order_relaxed);
        }
        if (!nalloc)
            continue;
        put(&o, "site ");
        put_u(&o, s->pc, 16);
        put(&o, " ");
        put_i(&o, s->module > 0 ? s->module - 1 : -1);
        put(&o, " ");
        put_i(&o, s->c->cur + (lanes_ever ? site_delta(s) : 0));
        put(&o, " ");
        put_i(&o, s->c->hw);
        put(&o, " ");
        put_k(&o, nalloc);
        put(&o, " ");
        put_u(&o, bytes, 10);
        put(&o, " ");
        put_k(&o, nlive);
        if (dhat) {
            /* Lifetimes of blocks still live count up to the end. */
            put(&o, " ");
            put_u(&o, s->tl + s->c->nlive * end - s->sumborn, 10);
            put(&o, " ");
            put_i(&o, s->hwbk);
            put(&o, " ");
            put_i(&o, s->gb);
            put(&o, " ");
            put_i(&o, s->gbk);
        }
        put(&o, "\n");
        if (s->pools != POOL1) {
            put(&o, "pools ");
            put_u(&o, s->pools, 10);
            put(&o, "\n");
        }
        if (ntemp) {
            put(&o, "temp ");
            put_k(&o, ntemp);
            put(&o, "\n");
        }
        if (peak) {
            int then = s->pepoch == peak_epoch;
            put_at_peak(&o, then ? s->gb : s->c->cur, then ? (uint64_t)s->gbk : s->c->nlive);
        }
    }
    for (uint32_t j = 0; stacks_on && j < NSTACKS; j++) {
        struct stack *st = &stacks[j];
        if (!page_known(st) || (j && !st->ready))
            continue;
        uint64_t nalloc = st->nalloc, bytes = st->bytes, nlive = st->nlive, ntemp = st->ntemp;
        int64_t cur = st->cur;
        for (uint32_t l = 0; j && l < NLANES; l++) {
            /* Ready: its lanes have their blocks (stack_create). */
            const struct stack_lane *sl = &stack_lanes[(size_t)j * NLANES + l];
            nalloc += atomic_load_explicit(&sl->nalloc, memory_order_relaxed);
            bytes += atomic_load_explicit(&sl->bytes, memory_order_relaxed);
            nlive += atomic_load_explicit(&sl->nlive, memory_order_relaxed);
            cur += atomic_load_explicit(&sl->cur, memory_order_relaxed);
            ntemp += atomic_load_explicit(&sl->ntemp, memory_order_relaxed);
        }
        if (!nalloc)
            continue;
        put(&o, "stack ");
        put_k(&o, nalloc);
        put(&o, " ");
        put_u(&o, bytes, 10);
        put(&o, " ");
        put_k(&o, nlive);
        put(&o, " ");
        put_i(&o, cur);
        if (!j)
            put(&o, " overflow");
        for (uint32_t d = 0; j && d < st->depth; d++) {
            put(&o, " ");
            put_i(&o, frames[st->first + d].module);
            put(&o, ":");
            put_u(&o, frames[st->first + d].pc, 16);
        }
        put(&o, "\n");
        if (ntemp) {
            put(&o, "temp ");
            put_k(&o, ntemp);
            put(&o, "\n");
        }
        if (peak) {
            int then = st->pepoch == peak_epoch;
            put_at_peak(&o, then ? st->pcur : st->cur, then ? st->plive : st->nlive);
        }
    }
    put(&o, "untracked ");
    put_u(&o, untracked_allocs, 10);
    put(&o, " ");
    put_u(&o, unknown_frees, 10);
    put(&o, " ");
    put_u(&o, table_failures, 10);
    put(&o, "\nend\n");
    sigsafe_flush(&o);
    close(fd);
    if (final) {
        atomic_store(&live->state, LIVE_DONE);
        if (live_path[0])
            unlink(live_path);
    }
}

__attribute__((destructor)) static void dtor(void)
{
    if (!enabled)
        return;
    busy = 1;
    /* Sites whose module was not resolved yet. */
    uint32_t nu = atomic_load(&nused);
    for (uint32_t u = 0; u < nu && u < NSITES; u++) {
        if (!page_known(&used[u]))
            continue;
        struct site *s = &sites[used[u]];
        if (s->pc && s->module == 0) {
            int m = module_index(s->pc);
            s->module = m < 0 ? -1 : m + 1;
        }
    }
    report(1);
    enabled = 0;
    heap = fast = 0;
    busy = 0;
}

/* attach.c's detach: count nothing from now on (no report at exit, none
 * for a forked child); what was counted stays in the table and the last
 * report. Takes no lock: every other thread is stopped. */
void mprof_stop(void)
{
    enabled = 0;
    heap = fast = 0;
}

/* attach.c: a report now, while the process goes on (its reporter thread
 * calls this when profdev asks). */
void mprof_report_now(void)
{
    if (!enabled)
        return;
    busy = 1;
    report(0);
    busy = 0;
}
