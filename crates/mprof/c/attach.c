/*
 * attach.c: libprofdev_mprof.so loaded into a process that is already
 * running (`startmp1 PID` on prof/ctl, through profdev-inject), instead of
 * preloaded at its start.
 *
 * profdev_mprof_attach(config) gives the library the settings LD_PRELOAD's
 * environment would have given (config: "NAME=VALUE" lines with the same
 * names, PROFDEV_MPROF_DIR, PROFDEV_MPROF_WRAPPERS...; mprof.c reads them
 * through mprof_getenv), starts the accounting (mprof_attach_start: the
 * one start, as the constructor dlopen ran saw the library was not
 * preloaded and started nothing), and
 * redirects the malloc family of every module already loaded to this
 * library: each module's GOT entries (JUMP_SLOT and GLOB_DAT relocations,
 * from DT_JMPREL and DT_RELA) for malloc, free, calloc, realloc,
 * reallocarray, posix_memalign, aligned_alloc, memalign, valloc and pvalloc
 * are overwritten with this library's functions (RELRO pages are made
 * writable for the write, then read-only again). The C library's own GOT
 * is patched too, so strdup, getline... are counted as under LD_PRELOAD.
 * C++'s operator new and delete are not redirected themselves: libstdc++
 * implements them with malloc and free through its GOT, which is patched.
 *
 * Not patched: this library (its own calls reach the real allocator
 * through __libc_malloc...), the dynamic loader and the vDSO. Modules
 * loaded later: dlopen and dlmopen are redirected too, to a wrapper that
 * calls the real one and patches again (as heaptrack's injection does; the
 * real dlopen then sees this library as its caller, which matters only for
 * a library loaded by bare name through its caller's RUNPATH).
 *
 * Blocks allocated before the attach are not in the block table: their
 * frees and reallocs subtract nothing (see mprof.c).
 *
 * Reports on demand: a thread of the library ("profdev-mprof", every
 * signal blocked) waits on a FIFO, `request` in the report directory;
 * each time a writer opens it, writes and closes it, the thread writes a
 * report (mprof.PID.K, K one more than the last), as the exit does. The
 * FIFO is made by mkfifo (which never follows a link or reuses a name)
 * and opened O_NOFOLLOW; anything else found there ends the thread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* mprof.c's hooks. */
int mprof_attach_start(void);
void mprof_report_now(void);
void mprof_stop(void);
const char *mprof_getenv(const char *name);

/* ---- the settings ---------------------------------------------------- */

static char config[8192];
static int attached;

/* In an attached process the settings come from the config given to
 * profdev_mprof_attach, not from the environment. */
const char *mprof_getenv(const char *name)
{
    if (!attached)
        return getenv(name);
    size_t l = strlen(name);
    for (const char *p = config; *p; p += strlen(p) + 1)
        if (!strncmp(p, name, l) && p[l] == '=')
            return p + l + 1;
    return 0;
}

/* ---- the GOT ---------------------------------------------------------- */

static const char *const names[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
    "aligned_alloc", "memalign", "valloc", "pvalloc",
    /* pools 2 and 3: the program's own mappings and break */
    "mmap", "mmap64", "munmap", "mremap", "sbrk", "brk", "dlopen", "dlmopen", 0};
#define NNAMES (sizeof names / sizeof names[0] - 1)
static void *ours[NNAMES];
static void *(*real_dlopen)(const char *, int);
static void *(*real_dlmopen)(Lmid_t, const char *, int);
static uintptr_t self_base;
static pthread_mutex_t patch_lock = PTHREAD_MUTEX_INITIALIZER;
static int npatched;
/* Every slot patched and what it held, for the detach: at most MAX_SAVED
 * (a module past that is left unpatched, uncounted, rather than kept
 * hooked for ever). */
#define MAX_SAVED 8192
static struct saved {
    void **slot;
    void *old;
    int relro;
} saved[MAX_SAVED];
static int nsaved;
/* Set by profdev_mprof_detach: nothing is patched again, the reporter
 * thread ends at its next wake-up. */
static volatile int detached;

static void patch_all(void);

static void *hook_dlopen(const char *file, int mode)
{
    void *h = real_dlopen(file, mode);
    if (h)
        patch_all();
    return h;
}

static void *hook_dlmopen(Lmid_t ns, const char *file, int mode)
{
    void *h = real_dlmopen(ns, file, mode);
    if (h)
        patch_all();
    return h;
}

static int which(const char *n)
{
    for (unsigned i = 0; i < NNAMES; i++)
        if (!strcmp(n, names[i]))
            return i;
    return -1;
}

/* An address of the dynamic section: relocated by the loader on most
 * targets (glibc adjusts d_ptr in place), a link-time value otherwise. */
static uintptr_t dyn_addr(uintptr_t base, uintptr_t v)
{
    return v < base ? base + v : v;
}

static void patch_slot(uintptr_t slot, void *to, uintptr_t relro_lo, uintptr_t relro_hi)
{
    void **p = (void **)slot;
    if (*p == to || nsaved >= MAX_SAVED)
        return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = slot & ~(uintptr_t)(pg - 1);
    int in_relro = slot >= relro_lo && slot < relro_hi;
    if (mprotect((void *)page, pg, PROT_READ | PROT_WRITE))
        return;
    saved[nsaved++] = (struct saved){p, *p, in_relro};
    __atomic_store_n(p, to, __ATOMIC_RELEASE);
    if (in_relro)
        mprotect((void *)page, pg, PROT_READ);
    npatched++;
}

static void patch_relocs(uintptr_t base, const ElfW(Rela) *r, size_t size, const ElfW(Sym) *sym,
                         const char *str, size_t strsz, uintptr_t relro_lo, uintptr_t relro_hi)
{
    for (size_t i = 0; i < size / sizeof *r; i++) {
        unsigned long type = ELF64_R_TYPE(r[i].r_info);
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
            continue;
        unsigned long si = ELF64_R_SYM(r[i].r_info);
        if (!si || sym[si].st_name >= strsz)
            continue;
        int k = which(str + sym[si].st_name);
        if (k < 0 || !ours[k])
            continue;
        patch_slot(base + r[i].r_offset, ours[k], relro_lo, relro_hi);
    }
}

static int patch_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    uintptr_t base = info->dlpi_addr;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (base == self_base || strstr(name, "linux-vdso") || strstr(name, "/ld-linux") ||
        strstr(name, "/ld-musl") || !strncmp(name, "ld-linux", 8))
        return 0;
    const ElfW(Dyn) *dyn = 0;
    uintptr_t relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = base + ph->p_vaddr;
            relro_hi = relro_lo + ph->p_memsz;
        }
    }
    if (!dyn)
        return 0;
    const ElfW(Sym) *sym = 0;
    const char *str = 0;
    size_t strsz = 0, pltsz = 0, relasz = 0;
    const ElfW(Rela) *jmprel = 0, *rela = 0;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB:
            sym = (const ElfW(Sym) *)dyn_addr(base, d->d_un.d_ptr);
            break;
        case DT_STRTAB:
            str = (const char *)dyn_addr(base, d->d_un.d_ptr);
            break;
        case DT_STRSZ:
            strsz = d->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = (const ElfW(Rela) *)dyn_addr(base, d->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltsz = d->d_un.d_val;
            break;
        case DT_PLTREL:
            pltrel = d->d_un.d_val;
            break;
        case DT_RELA:
            rela = (const ElfW(Rela) *)dyn_addr(base, d->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = d->d_un.d_val;
            break;
        }
    }
    if (!sym || !str)
        return 0;
    if (jmprel && pltrel == DT_RELA)
        patch_relocs(base, jmprel, pltsz, sym, str, strsz, relro_lo, relro_hi);
    if (rela)
        patch_relocs(base, rela, relasz, sym, str, strsz, relro_lo, relro_hi);
    return 0;
}

static void patch_all(void)
{
    pthread_mutex_lock(&patch_lock);
    if (!detached)
        dl_iterate_phdr(patch_module, 0);
    pthread_mutex_unlock(&patch_lock);
}

/* ---- reports on demand ------------------------------------------------ */

static char fifo[4200];

static void *reporter(void *arg)
{
    (void)arg;
    for (;;) {
        /* Never through a link, and only the FIFO made below: a regular
         * file put in its place (the directory is the user's) would
         * otherwise ask for reports without end. */
        int fd = open(fifo, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            return 0;
        struct stat st;
        if (fstat(fd, &st) || !S_ISFIFO(st.st_mode) || st.st_uid != geteuid()) {
            close(fd);
            return 0;
        }
        char b[64];
        while (read(fd, b, sizeof b) > 0)
            ;
        close(fd);
        if (detached)
            return 0;
        mprof_report_now();
    }
}

static void start_reporter(void)
{
    const char *d = mprof_getenv("PROFDEV_MPROF_DIR");
    if (!d || snprintf(fifo, sizeof fifo, "%s/request", d) >= (int)sizeof fifo)
        return;
    if (mkfifo(fifo, 0600))
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the thread */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 128 << 10);
    pthread_t t;
    if (!pthread_create(&t, &at, reporter, 0))
        pthread_setname_np(t, "profdev-mprof");
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, 0);
}

/* ---- the entry -------------------------------------------------------- */

/* Start counting in this (running) process with the settings `cfg`
 * ("NAME=VALUE" lines); the number of GOT slots redirected (> 0), or -1
 * if the accounting could not start (no directory, no memory), or -2 if
 * called twice. Called through profdev-inject, all other threads
 * stopped. */
EXPORT int profdev_mprof_attach(const char *cfg)
{
    if (attached)
        return -2;
    size_t n = strlen(cfg);
    if (n >= sizeof config - 1)
        return -1;
    memcpy(config, cfg, n + 1);
    config[n + 1] = 0;
    for (char *p = config; *p; p++)
        if (*p == '\n')
            *p = 0;
    attached = 1;
    if (!mprof_attach_start())
        return -1;
    /* This library's own functions (not whatever the global scope binds
     * these names to): looked up in this object's handle. */
    Dl_info di;
    if (!dladdr((void *)profdev_mprof_attach, &di) || !di.dli_fname)
        return -1;
    self_base = (uintptr_t)di.dli_fbase;
    void *self = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!self)
        return -1;
    real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_DEFAULT, "dlopen");
    real_dlmopen = (void *(*)(Lmid_t, const char *, int))dlsym(RTLD_DEFAULT, "dlmopen");
    for (unsigned i = 0; i < NNAMES; i++) {
        if (!strcmp(names[i], "dlopen"))
            ours[i] = real_dlopen ? (void *)hook_dlopen : 0;
        else if (!strcmp(names[i], "dlmopen"))
            ours[i] = real_dlmopen ? (void *)hook_dlmopen : 0;
        else {
            ours[i] = dlsym(self, names[i]);
            Dl_info o;
            /* Only if it is really ours. */
            if (ours[i] && (!dladdr(ours[i], &o) || (uintptr_t)o.dli_fbase != self_base))
                ours[i] = 0;
        }
    }
    dlclose(self);
    patch_all();
    start_reporter();
    return npatched;
}

/* ---- the detach ------------------------------------------------------- */

/* Stop counting and give every GOT slot back what it held before the
 * attach (a slot something else rewrote since is left alone), so the
 * process runs on as if never attached; the number of slots restored,
 * or -1 if not attached, or -2 if a patch is under way (try again).
 * Called through profdev-inject, all other threads stopped: no lock is
 * waited for. The library stays loaded (a thread may be inside it, and
 * its fork handlers are registered), counting nothing; blocks allocated
 * while attached are freed by the C library as any other (the counts
 * are kept beside the blocks, never in them). The reporter thread ends
 * at its next wake-up (profdev opens the FIFO once more). */
EXPORT int profdev_mprof_detach(void)
{
    if (!attached || detached)
        return -1;
    if (pthread_mutex_trylock(&patch_lock))
        return -2;
    detached = 1;
    mprof_stop();
    long pg = sysconf(_SC_PAGESIZE);
    int restored = 0;
    for (int i = nsaved - 1; i >= 0; i--) {
        struct saved *v = &saved[i];
        uintptr_t page = (uintptr_t)v->slot & ~(uintptr_t)(pg - 1);
        if (mprotect((void *)page, pg, PROT_READ | PROT_WRITE))
            continue;
        void *cur = __atomic_load_n(v->slot, __ATOMIC_ACQUIRE);
        int ours_now = 0;
        for (unsigned k = 0; k < NNAMES; k++)
            ours_now |= ours[k] && cur == ours[k];
        if (ours_now) {
            __atomic_store_n(v->slot, v->old, __ATOMIC_RELEASE);
            restored++;
        }
        if (v->relro)
            mprotect((void *)page, pg, PROT_READ);
    }
    pthread_mutex_unlock(&patch_lock);
    return restored;
}
