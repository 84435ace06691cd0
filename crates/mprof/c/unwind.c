/*
 * unwind.c: the stack walk with unwind tables (issue 29). profdev builds,
 * before the run, one table per module it knows (the program and its
 * DT_NEEDED libraries) from the module's .eh_frame
 * (crates/mprof/src/unwind.rs: the format is described there) into the
 * directory PROFDEV_MPROF_UNWIND_DIR names, as DEV-INO.unw. The library
 * maps a module's table read-only when a walk first meets the module,
 * checks its header (magic, version, count against the file's size, the
 * module's size and mtime), and keeps each return address's rule in a
 * lock-free hash: a frame seen before costs one lookup.
 *
 * A module profdev did not know before the run (a program CMD executes,
 * a library loaded with dlopen) has no table there at first: the library
 * opens the module's file and sends the descriptor over the directory's
 * socket USOCK (profdev_mprof::unwind::serve), and waits for its one-byte
 * answer at most UREQ_MS, once per module and process (the walk stays on
 * the frame pointer there if no table comes).
 *
 * At each frame the rule for its pc gives the CFA (rsp+N or rbp+N), the
 * return address at CFA-8 and rbp (saved at CFA+K or unchanged); where
 * no table covers the pc (a module without a table: dlopen'd ones, code
 * outside any FDE) the frame pointer is followed as before; a rule of
 * another kind ends the walk. Every read is checked: 8-aligned, at or
 * above the frame below it and below the thread's stack top, and the
 * stack pointer strictly increases from frame to frame (so the walk
 * ends). No lock is taken on a cached frame and nothing is allocated.
 */
#include "mprof.h"
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

__thread uintptr_t mprof_site_sp __attribute__((tls_model("initial-exec")));

struct uentry {
    uint64_t start;
    int32_t cfa_off;
    int16_t rbp_off;
    uint8_t kind; /* 0 none (frame pointer), 1 CFA=rsp+N, 2 CFA=rbp+N, 3 unknown */
    uint8_t pad;
};
_Static_assert(sizeof(struct uentry) == 16, "an entry is 16 bytes");

#define UMAGIC "PDMPUNW\0"
#define UVERSION 1
#define UHEADER 32
#define UMODS 256
#define USOCK "build.sock" /* profdev_mprof::unwind::SOCKET */
#define UREQ_MS 10000

struct umod {
    _Atomic(const void *) lm;
    uintptr_t bias;
    const struct uentry *e; /* 0: no table */
    uint32_t n;
};
static struct umod umods[UMODS];
static _Atomic int numods;
static pthread_mutex_t ulock = PTHREAD_MUTEX_INITIALIZER;
static char udir[400];
static _Atomic int ustate; /* 0 not looked, 1 no directory, 2 tables */

int mprof_unwind_ready(void)
{
    int s = atomic_load_explicit(&ustate, memory_order_acquire);
    if (LIKELY(s))
        return s == 2;
    const char *d = getenv("PROFDEV_MPROF_UNWIND_DIR");
    pthread_mutex_lock(&ulock);
    if (!atomic_load(&ustate)) {
        s = 1;
        if (d && d[0] == '/' && strlen(d) < sizeof udir - 64) {
            strcpy(udir, d);
            s = 2;
        }
        atomic_store_explicit(&ustate, s, memory_order_release);
    }
    pthread_mutex_unlock(&ulock);
    return atomic_load(&ustate) == 2;
}

static char *put_hex(char *o, uint64_t v)
{
    char t[17];
    int k = 0;
    do {
        t[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (k)
        *o++ = t[--k];
    return o;
}

/* Ask profdev for the table of the module whose file is path (ms: its
 * stat, which names the table): its descriptor sent over USOCK, at most
 * UREQ_MS for the answer. Whether the table is there now. */
static int request_table(const char *path, const struct stat *ms)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t dl = strlen(udir);
    int dfd = -1;
    if (dl + 1 + sizeof USOCK <= sizeof a.sun_path) {
        memcpy(a.sun_path, udir, dl);
        a.sun_path[dl] = '/';
        memcpy(a.sun_path + dl + 1, USOCK, sizeof USOCK);
    } else {
        /* A directory too long to name in sun_path: named through a
         * descriptor of it, /proc/self/fd/N/USOCK. */
        dfd = open(udir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            return 0;
        static const char pre[] = "/proc/self/fd/";
        char *o = a.sun_path;
        memcpy(o, pre, sizeof pre - 1);
        o += sizeof pre - 1;
        char t[12];
        int k = 0;
        for (unsigned v = (unsigned)dfd; k == 0 || v; v /= 10)
            t[k++] = (char)('0' + v % 10);
        while (k)
            *o++ = t[--k];
        *o++ = '/';
        memcpy(o, USOCK, sizeof USOCK);
    }
    int mfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat fs;
    int s = -1;
    char answer = 0;
    if (mfd < 0)
        goto out;
    if (fstat(mfd, &fs) || !S_ISREG(fs.st_mode) || fs.st_dev != ms->st_dev ||
        fs.st_ino != ms->st_ino)
        goto out;
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a))
        goto out;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c;
    memset(&c, 0, sizeof c);
    char one = 'u';
    struct iovec v = {.iov_base = &one, .iov_len = 1};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = c.b,
                       .msg_controllen = sizeof c.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &mfd, sizeof(int));
    if (sendmsg(s, &m, MSG_NOSIGNAL) != 1)
        goto out;
    struct timespec now, end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += UREQ_MS / 1000;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (left <= 0)
            break;
        struct pollfd p = {.fd = s, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 1 && read(s, &answer, 1) != 1)
            answer = 0;
        break;
    }
out:
    if (s >= 0)
        close(s);
    if (mfd >= 0)
        close(mfd);
    if (dfd >= 0)
        close(dfd);
    return answer == '1';
}

/* Map the table of the module lm (whose file is path) into m, checked;
 * m->e stays 0 when there is none or it is bad. */
static void load_table(struct umod *m, const char *path)
{
    struct stat ms, ts;
    if (stat(path, &ms))
        return;
    char f[sizeof udir + 48];
    size_t dl = strlen(udir);
    memcpy(f, udir, dl);
    char *o = f + dl;
    *o++ = '/';
    o = put_hex(o, (uint64_t)ms.st_dev);
    *o++ = '-';
    o = put_hex(o, (uint64_t)ms.st_ino);
    memcpy(o, ".unw", 5);
    int fd = open(f, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT && request_table(path, &ms))
        fd = open(f, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    if (fstat(fd, &ts) || !S_ISREG(ts.st_mode) || ts.st_size < UHEADER ||
        ts.st_size > (1 << 30) || (ts.st_size - UHEADER) % sizeof(struct uentry)) {
        close(fd);
        return;
    }
    size_t size = (size_t)ts.st_size;
    const unsigned char *b = sys_mmap(0, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (b == MAP_FAILED)
        return;
    uint32_t version, count;
    uint64_t msize, mtime;
    memcpy(&version, b + 8, 4);
    memcpy(&count, b + 12, 4);
    memcpy(&msize, b + 16, 8);
    memcpy(&mtime, b + 24, 8);
    uint64_t want = (uint64_t)ms.st_mtim.tv_sec * 1000000000u + (uint64_t)ms.st_mtim.tv_nsec;
    if (memcmp(b, UMAGIC, 8) || version != UVERSION ||
        (uint64_t)count * sizeof(struct uentry) != size - UHEADER ||
        msize != (uint64_t)ms.st_size || mtime != want) {
        sys_munmap((void *)b, size);
        return;
    }
    m->e = (const struct uentry *)(b + UHEADER);
    m->n = count;
}

/* The module lm's entry, its table mapped on first meeting. */
static const struct umod *umod_of(const struct link_map *lm)
{
    int n = atomic_load_explicit(&numods, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&umods[i].lm, memory_order_relaxed) == lm)
            return &umods[i];
    const struct umod *r = 0;
    pthread_mutex_lock(&ulock);
    n = atomic_load(&numods);
    for (int i = 0; i < n && !r; i++)
        if (umods[i].lm == lm)
            r = &umods[i];
    if (!r && n < UMODS) {
        struct umod *m = &umods[n];
        m->bias = lm->l_addr;
        char exe[512];
        const char *path = lm->l_name;
        if (!path || !path[0]) {
            ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[k > 0 ? k : 0] = 0;
            path = exe;
        }
        int e = errno; /* the call the walk is inside of keeps its errno */
        if (path[0])
            load_table(m, path);
        errno = e;
        atomic_store_explicit(&m->lm, lm, memory_order_relaxed);
        atomic_store_explicit(&numods, n + 1, memory_order_release);
        r = m;
    }
    pthread_mutex_unlock(&ulock);
    return r;
}

/* A rule packed in 64 bits: bit 63 set, kind in bits 0-7, cfa_off in
 * 8-39, rbp_off in 40-55. */
#define RULE(kind, cfa, rbp)                                                                \
    ((1ULL << 63) | (uint64_t)(kind) | ((uint64_t)(uint32_t)(cfa) << 8) |                 \
     ((uint64_t)(uint16_t)(rbp) << 40))

/* The rule of the frame whose return address is pc (binary search). */
static uint64_t rule_lookup(uintptr_t pc)
{
    const struct link_map *lm = mprof_link_map_of(pc - 1);
    if (!lm)
        return RULE(0, 0, 0);
    const struct umod *m = umod_of(lm);
    if (!m || !m->e || !m->n)
        return RULE(0, 0, 0);
    uint64_t a = (uint64_t)(pc - 1 - m->bias);
    const struct uentry *e = m->e;
    if (a < e[0].start)
        return RULE(0, 0, 0);
    uint32_t lo = 0, hi = m->n; /* e[lo].start <= a; the answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (e[mid].start <= a)
            lo = mid;
        else
            hi = mid;
    }
    const struct uentry *u = &e[lo];
    if (u->kind > 3)
        return RULE(3, 0, 0);
    return RULE(u->kind, u->cfa_off, u->rbp_off);
}

#define UCACHE (1u << 13)
struct ucache {
    _Atomic uintptr_t pc;
    _Atomic uint64_t rule;
};
static struct ucache ucache[UCACHE];

static inline uint64_t uhash(uintptr_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* The rule for pc, cached per return address. */
static inline uint64_t rule_for(uintptr_t pc)
{
    uint64_t h = uhash(pc);
    for (unsigned i = 0; i < 8; i++) {
        struct ucache *c = &ucache[(h + i) & (UCACHE - 1)];
        uintptr_t k = atomic_load_explicit(&c->pc, memory_order_acquire);
        if (k == pc) {
            uint64_t r = atomic_load_explicit(&c->rule, memory_order_acquire);
            if (LIKELY(r))
                return r;
            break;
        }
        if (!k)
            break;
    }
    uint64_t r = rule_lookup(pc);
    for (unsigned i = 0; i < 8; i++) {
        struct ucache *c = &ucache[(h + i) & (UCACHE - 1)];
        uintptr_t zero = 0;
        if (atomic_compare_exchange_strong(&c->pc, &zero, pc) || zero == pc) {
            atomic_store_explicit(&c->rule, r, memory_order_release);
            break;
        }
    }
    return r;
}

/* Is [a, a+8) a readable word of the stack: 8-aligned, at or above
 * floor, below hi. */
static inline int ok_word(uintptr_t a, uintptr_t floor, uintptr_t hi)
{
    return !(a & 7) && a >= floor && a < hi && hi - a >= 8;
}

uint64_t mprof_unwind_rule(uintptr_t pc)
{
    return rule_for(pc);
}

int mprof_unwind_step(uintptr_t *pc, uintptr_t *sp, uintptr_t *fp, uintptr_t hi)
{
    return mprof_rule_step(rule_for(*pc), pc, sp, fp, hi);
}

/* Whether the words last read from frame t's step on are unchanged. */
static inline int rest_holds(const struct mprof_last *last, int t)
{
    uintptr_t diff = 0;
    for (int k = 0; k < last->q[t]; k++)
        diff |= *(const uintptr_t *)last->ra[k] ^ last->rv[k];
    return !diff;
}

/* Keep the walk just made (pcs) in last: its own frames 0..m-1 (the
 * rest, if taken, is last's frames 0..t, kept; else t is -1) and its
 * reads. same: the frames are the last walk's (its stack stays). */
static void keep_walk(struct mprof_last *last, const uintptr_t *pcs, int t, int m, int whole,
                      int same)
{
    int qb = t >= 0 ? last->q[t] : 0, nr = last->wnr;
    if (t + 1 + m > MPROF_LAST_FRAMES || nr > MPROF_LAST_READS) {
        last->n = 0;
        last->stk = 0;
        return;
    }
    /* Only the reads that decided the walk; wq0 counts those. */
    int w = 0, f = 0;
    for (int r = 0; r < nr; r++) {
        for (; f < m && last->wq0[f] <= r; f++)
            last->wq0[f] = (uint8_t)w;
        if (last->wused[r]) {
            last->wra[w] = last->wra[r];
            last->wrv[w] = last->wrv[r];
            w++;
        }
    }
    for (; f < m; f++)
        last->wq0[f] = (uint8_t)w;
    nr = w;
    if (qb + nr > MPROF_LAST_READS) {
        last->n = 0;
        last->stk = 0;
        return;
    }
    for (int k = 0; k < m; k++) {
        int p = t + m - k;
        last->pc[p] = pcs[k];
        last->sp[p] = last->wsp[k];
        last->fp[p] = last->wfp[k];
        last->fpuse[p] = last->wfpuse[k];
        last->q[p] = (uint8_t)(qb + nr - last->wq0[k]);
    }
    for (int r = 0; r < nr; r++) {
        last->ra[qb + nr - 1 - r] = last->wra[r];
        last->rv[qb + nr - 1 - r] = last->wrv[r];
    }
    last->n = t + 1 + m;
    last->whole = whole;
    if (!same)
        last->stk = 0;
}

int mprof_unwind_walk(uintptr_t *pcs, int max, uintptr_t sp, uintptr_t fp, uintptr_t here,
                      uintptr_t hi, struct mprof_wrec *rec, struct mprof_last *last)
{
    int n = 1, whole = 1;
    uintptr_t pc = pcs[0];
    /* Where fp came from: the one given (rec->fp if used), a read not
     * recorded yet (at pa: recorded only if the value is used, so a
     * memo compares only words that made the walk), or a recorded one. */
    enum { GIVEN, PENDING, RECORDED } fsrc = GIVEN;
    uintptr_t pa = 0;
    int pk = 0; /* where the read at pa is among the kept ones */
    /* With last: the cursor t (its frame at or above the current one),
     * the frame matched (-1 none), and fp_from: the frame since which fp
     * is in hand. */
    int t = -1, matched = -1, mine = 0, fp_from = 0, tries = 2, own = 0;
    if (sp && (sp < here || sp >= hi))
        sp = 0;
    rec->own = rec->same = 0;
    if (last && !last->inuse) {
        last->inuse = 1;
        atomic_signal_fence(memory_order_seq_cst);
        own = rec->own = 1;
        t = last->n - 2; /* frame 1's candidates and above */
        last->wnr = 0;
    }
    /* The walk's own frame i (pcs[i]), reached with s and f. */
#define OWN_FRAME(i, s, f)                                                                  \
    do {                                                                                    \
        if (own && (i) < MPROF_LAST_FRAMES) {                                               \
            last->wsp[i] = (s);                                                             \
            last->wfp[i] = (f);                                                             \
            last->wfpuse[i] = 0;                                                            \
            last->wq0[i] = (uint8_t)(last->wnr < 255 ? last->wnr : 255);                    \
        }                                                                                   \
    } while (0)
    /* A read kept for the next walk; used: it decided this walk (a
     * return address), or not yet (a saved frame pointer: kept only if
     * that value is used, at pk). */
#define KEEP_READ(a, v, used)                                                               \
    do {                                                                                    \
        if (own) {                                                                          \
            if (last->wnr < MPROF_LAST_READS) {                                             \
                last->wra[last->wnr] = (a);                                                 \
                last->wrv[last->wnr] = (v);                                                 \
                last->wused[last->wnr] = (used);                                            \
            }                                                                               \
            last->wnr++;                                                                    \
        }                                                                                   \
    } while (0)
#define FP_USED()                                                                           \
    do {                                                                                    \
        if (fsrc == GIVEN)                                                                  \
            rec->fp = 1;                                                                    \
        else if (fsrc == PENDING)                                                           \
            mprof_read(rec, pa);                                                            \
        if (own) {                                                                          \
            if (fsrc == PENDING && pk < MPROF_LAST_READS)                                   \
                last->wused[pk] = 1;                                                        \
            for (int u = fp_from; u < n && u < MPROF_LAST_FRAMES; u++)                      \
                last->wfpuse[u] = 1;                                                        \
        }                                                                                   \
        fsrc = RECORDED;                                                                    \
    } while (0)
    OWN_FRAME(0, sp, fp);
    while (n < max) {
        if (t >= 0 && n > 1) {
            /* Frame n-1 (pc, sp, fp): last's frame t? (sp grows with
             * each frame, and with each of last's toward t = 0.) */
            while (t >= 0 && last->sp[t] < sp)
                t--;
            int i = n - 1, j = t >= 0 ? last->n - 1 - t : 0;
            if (t >= 0 && last->sp[t] == sp && last->pc[t] == pc &&
                (!last->fpuse[t] || last->fp[t] == fp) && (last->whole || i >= j) && tries-- > 0 &&
                rest_holds(last, t)) {
                if (last->fpuse[t])
                    FP_USED();
                /* The same frames below as the last walk's too? */
                int same = last->n == t + 1 + i;
                for (int k = 0; same && k < i; k++)
                    same = pcs[k] == last->pc[t + i - k];
                rec->same = same;
                int c = t < max - n ? t : max - n;
                const uintptr_t *from = &last->pc[t - 1];
                for (int k = 0; k < c; k++)
                    pcs[n + k] = from[-k];
                n += c;
                whole = last->whole && n == i + 1 + t;
                matched = t;
                mine = i;
                /* The rest's reads, for the memo, where they fit and the
                 * memo will take them (mprof.c's fast_stack: a stack met
                 * twice in a row). */
                if (same && rec->n + last->q[t] <= MPROF_WREC) {
                    for (int k = 0; k < last->q[t]; k++, rec->n++) {
                        rec->addr[rec->n] = last->ra[k];
                        rec->val[rec->n] = last->rv[k];
                    }
                } else
                    rec->n = MPROF_WREC + 1;
                break;
            }
        }
        uint64_t r = rule_for(pc);
        unsigned kind = r & 0xff;
        int32_t cfa_off = (int32_t)(uint32_t)(r >> 8);
        int16_t rbp_off = (int16_t)(uint16_t)(r >> 40);
        uintptr_t floor = sp ? sp : here, ra, nsp, nfp;
        if (kind == 3)
            break;
        if (kind == 0 || !sp) {
            /* the frame pointer: fp[0] the caller's, fp[1] the return address */
            FP_USED();
            if (!ok_word(fp, floor, hi) || !ok_word(fp + 8, floor, hi) || fp + 16 <= floor)
                break;
            ra = mprof_read(rec, fp + 8);
            nfp = ((const uintptr_t *)fp)[0];
            KEEP_READ(fp + 8, ra, 1);
            pk = own ? last->wnr : 0;
            KEEP_READ(fp, nfp, 0);
            fsrc = PENDING;
            pa = fp;
            fp_from = n;
            nsp = fp + 16;
        } else {
            uintptr_t base = kind == 1 ? sp : fp;
            if (kind == 2)
                FP_USED();
            uintptr_t cfa = base + (intptr_t)cfa_off;
            if (cfa <= floor || !ok_word(cfa - 8, floor, hi))
                break;
            ra = mprof_read(rec, cfa - 8);
            KEEP_READ(cfa - 8, ra, 1);
            nfp = fp;
            if (rbp_off) {
                uintptr_t a = cfa + (intptr_t)rbp_off;
                if (!ok_word(a, floor, hi))
                    break;
                nfp = *(const uintptr_t *)a;
                pk = own ? last->wnr : 0;
                KEEP_READ(a, nfp, 0);
                fsrc = PENDING;
                pa = a;
                fp_from = n;
            }
            nsp = cfa;
        }
        if (ra < 4096 || nsp <= floor)
            break;
        OWN_FRAME(n, nsp, nfp);
        pcs[n++] = ra;
        pc = ra;
        sp = nsp;
        fp = nfp;
    }
    if (n >= max)
        whole = 0;
    if (own) {
        /* Its own frames: below the one matched (which last keeps), else all. */
        keep_walk(last, pcs, matched, matched >= 0 ? mine : n, whole, rec->same);
        atomic_signal_fence(memory_order_seq_cst);
        last->inuse = 0;
    }
#undef FP_USED
#undef KEEP_READ
#undef OWN_FRAME
    return n;
}
