/*
 * wrappers.c: the return addresses an allocation's site is found past
 * (mprof.c's is_wrapper caches the answer per address).
 *
 * Allocator wrappers: functions recognized by symbol (operator new,
 * Rust's alloc crate, strdup, g_malloc, xmalloc... and
 * PROFDEV_MPROF_WRAPPERS), read once per module from its .symtab and
 * .dynsym.
 *
 * System code: the functions profdev found declared in a system header
 * (crates/mprof/src/system.rs has the rule and the file's layout; profdev
 * writes the file before the run, PROFDEV_MPROF_SYSTEM names it), by
 * module file (device and inode, matched when the module is scanned):
 * std::vector's allocator, instantiated in the user's program at -O0, is
 * walked past to the user's line as operator new is. A module the file
 * does not name has no system code.
 */
#include "mprof.h"

static char extra_wrappers[1024];

/* Wrapper ranges found in the modules' symbol tables. */
#define MAX_RANGES 65536
struct range {
    uintptr_t lo, hi;
};
static struct range *ranges;
static _Atomic int nranges;
#define MAX_SCANNED 1024
static const void *scanned[MAX_SCANNED];
static int nscanned;
static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

/* The file of system code, mapped read-only, as 64-bit words after its
 * magic: modules, then per module dev, ino, n and n (start, end) pairs. */
static const uint64_t *sys_words;
static size_t sys_nwords;
#define SYS_MAX_BYTES ((size_t)64 << 20)
/* The scanned modules that have system code: their load bias and pairs. */
struct sysmod {
    uintptr_t base;
    const uint64_t *pairs;
    uint64_t n;
};
static struct sysmod sysmods[MAX_SCANNED];
static _Atomic int nsysmods;

static void load_system(const char *path)
{
    if (sys_words || !path || !path[0])
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    struct stat st;
    const unsigned char *b = MAP_FAILED;
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size >= 24 &&
        (size_t)st.st_size <= SYS_MAX_BYTES && st.st_size % 8 == 0)
        b = sys_mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (b == MAP_FAILED)
        return;
    const uint64_t *w = (const uint64_t *)(b + 16);
    size_t nw = (st.st_size - 16) / 8, at = 1;
    /* Checked whole before it is used: every count within the file. */
    int ok = !memcmp(b, "profdev-msys 1\0\0", 16);
    for (uint64_t m = 0; ok && m < w[0]; m++) {
        ok = at + 3 <= nw && w[at + 2] <= (nw - at - 3) / 2;
        if (ok)
            at += 3 + 2 * w[at + 2];
    }
    if (!ok) {
        sys_munmap((void *)b, st.st_size);
        return;
    }
    sys_words = w;
    sys_nwords = nw;
}

/* The system code of the module file dev/ino loaded at base. Under scan_lock. */
static void system_module(uint64_t dev, uint64_t ino, uintptr_t base)
{
    if (!sys_words)
        return;
    size_t at = 1;
    for (uint64_t m = 0; m < sys_words[0]; m++) {
        const uint64_t *e = &sys_words[at];
        if (e[0] == dev && e[1] == ino && e[2]) {
            int n = atomic_load(&nsysmods);
            if (n < MAX_SCANNED) {
                sysmods[n] = (struct sysmod){base, e + 3, e[2]};
                atomic_store_explicit(&nsysmods, n + 1, memory_order_release);
            }
            return;
        }
        at += 3 + 2 * e[2];
    }
}

static int in_system(uintptr_t pc)
{
    int n = atomic_load_explicit(&nsysmods, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        const struct sysmod *m = &sysmods[i];
        uintptr_t a = pc - m->base;
        uint64_t lo = 0, hi = m->n; /* the first pair ending above a */
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (m->pairs[2 * mid + 1] <= a)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < m->n && m->pairs[2 * lo] <= a)
            return 1;
    }
    return 0;
}

static int is_wrapper_name(const char *n)
{
    static const char *exact[] = {
        "strdup", "strndup", "__strdup", "__strndup", "wcsdup", "asprintf", "vasprintf",
        "__asprintf", "__vasprintf_internal", "open_memstream", "getline", "getdelim",
        "xmalloc", "xcalloc", "xrealloc", "xstrdup", "xstrndup", "xmemdup", "xzalloc",
        "g_malloc", "g_malloc0", "g_realloc", "g_try_malloc", "g_try_malloc0",
        "g_try_realloc", "g_malloc_n", "g_malloc0_n", "g_realloc_n", "g_strdup",
        "g_strndup", "g_memdup", "g_memdup2", "g_slice_alloc", "g_slice_alloc0",
        "__rust_alloc", "__rust_alloc_zeroed", "__rust_realloc", "__rdl_alloc",
        "__rdl_alloc_zeroed", "__rdl_realloc", "__rg_alloc", "__rg_alloc_zeroed",
        "__rg_realloc", 0};
    /* Each starts with one of these, and none with _ then another
     * character than _: most of a large module's symbols (C++'s _Z...)
     * are compared with none (a compiler's cc1 took 29M instructions of
     * strcmp at its first sampled allocation). */
    int maybe = n[0] && strchr("_agosvwx", n[0]) && (n[0] != '_' || n[1] == '_');
    /* The first two bytes compared first: every process scans the C
     * library's 3,000 names at its first allocation, most of them
     * starting with one of those letters. */
    for (int i = 0; maybe && exact[i]; i++)
        if (exact[i][1] == n[1] && !strcmp(n, exact[i]))
            return 1;
    /* The prefixes below all start with _Z or _R. */
    int z = n[0] == '_' && n[1] == 'Z', r = n[0] == '_' && n[1] == 'R';
    /* C++ operator new / new[] (all variants): _Znwm, _Znam, _ZnwmRKSt9nothrow_t... */
    if (z && (!strncmp(n, "_Znw", 4) || !strncmp(n, "_Zna", 4)))
        return 1;
    /* Rust's alloc crate (RawVec growth, finish_grow, Vec, String, Box...)
     * and std's System allocator, legacy mangling. */
    if (z && !strncmp(n, "_ZN5alloc", 9))
        return 1;
    if (z && !strncmp(n, "_ZN3std3sys", 11) && strstr(n, "alloc"))
        return 1;
    if (z && !strncmp(n, "_ZN4core3ptr", 12) && strstr(n, "alloc"))
        return 1;
    /* v0 mangling of the alloc crate: _RNv...5alloc... */
    if (r && strstr(n, "5alloc") && !strstr(n, "3std"))
        return 1;
    /* v0 mangling of the allocator shims (`__rustc::__rust_alloc`...). */
    if (r) {
        static const char *shims[] = {"___rust_alloc", "___rust_alloc_zeroed", "___rust_realloc",
                                      "___rdl_alloc", "___rdl_alloc_zeroed", "___rdl_realloc",
                                      "___rg_alloc", "___rg_alloc_zeroed", "___rg_realloc", 0};
        size_t l = strlen(n);
        for (int i = 0; shims[i]; i++) {
            size_t k = strlen(shims[i]);
            if (l > k && !strcmp(n + l - k, shims[i]) && n[l - k - 1] >= '0' && n[l - k - 1] <= '9')
                return 1;
        }
    }
    if (extra_wrappers[0]) {
        const char *p = extra_wrappers;
        size_t len = strlen(n);
        while (*p) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l == len && !strncmp(p, n, l))
                return 1;
            if (!e)
                break;
            p = e + 1;
        }
    }
    return 0;
}

static void add_range(uintptr_t lo, uintptr_t hi)
{
    int n = atomic_load(&nranges);
    if (n >= MAX_RANGES)
        return;
    ranges[n].lo = lo;
    ranges[n].hi = hi;
    atomic_store_explicit(&nranges, n + 1, memory_order_release);
}

static void scan_symtab(const unsigned char *img, size_t len, const Elf64_Shdr *sh, int nsh,
                        int idx, uintptr_t base)
{
    const Elf64_Shdr *s = &sh[idx];
    if (s->sh_link >= (unsigned)nsh || s->sh_entsize != sizeof(Elf64_Sym))
        return;
    const Elf64_Shdr *str = &sh[s->sh_link];
    if (s->sh_offset + s->sh_size > len || str->sh_offset + str->sh_size > len)
        return;
    const Elf64_Sym *sym = (const Elf64_Sym *)(img + s->sh_offset);
    size_t n = s->sh_size / sizeof(Elf64_Sym);
    const char *names = (const char *)img + str->sh_offset;
    for (size_t i = 0; i < n; i++) {
        if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || !sym[i].st_size || !sym[i].st_value)
            continue;
        if (sym[i].st_name >= str->sh_size)
            continue;
        const char *nm = names + sym[i].st_name;
        if (!memchr(nm, 0, str->sh_size - sym[i].st_name))
            continue;
        if (is_wrapper_name(nm))
            add_range(base + sym[i].st_value, base + sym[i].st_value + sym[i].st_size);
    }
}

/* Scan a module's .symtab and .dynsym once for wrapper functions. */
void mprof_scan_module(const struct link_map *lm)
{
    pthread_mutex_lock(&scan_lock);
    for (int i = 0; i < nscanned; i++)
        if (scanned[i] == lm)
            goto out;
    if (nscanned < MAX_SCANNED)
        scanned[nscanned++] = lm;
    const char *path = lm->l_name && lm->l_name[0] ? lm->l_name : "/proc/self/exe";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out;
    struct stat st;
    if (fstat(fd, &st) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        goto out;
    }
    system_module(st.st_dev, st.st_ino, lm->l_addr);
    size_t len = st.st_size;
    const unsigned char *img = sys_mmap(0, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (img == MAP_FAILED)
        goto out;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    if (!memcmp(eh->e_ident, ELFMAG, SELFMAG) && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
        eh->e_shentsize == sizeof(Elf64_Shdr) &&
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) <= len) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
        for (int i = 0; i < eh->e_shnum; i++)
            if (sh[i].sh_type == SHT_SYMTAB || sh[i].sh_type == SHT_DYNSYM)
                scan_symtab(img, len, sh, eh->e_shnum, i, lm->l_addr);
    }
    sys_munmap((void *)img, len);
out:
    pthread_mutex_unlock(&scan_lock);
}

static int in_wrapper_ranges(uintptr_t pc)
{
    int n = atomic_load_explicit(&nranges, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (pc >= ranges[i].lo && pc < ranges[i].hi)
            return 1;
    return 0;
}

int mprof_wrappers_init(const char *extra, const char *system_file)
{
    if (extra)
        strncpy(extra_wrappers, extra, sizeof extra_wrappers - 1);
    load_system(system_file);
    if (!ranges) {
        void *p = sys_mmap(0, sizeof(struct range) * MAX_RANGES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ranges = p == MAP_FAILED ? 0 : p;
    }
    return ranges != 0;
}

void mprof_scan_lock(int take)
{
    if (take)
        pthread_mutex_lock(&scan_lock);
    else
        pthread_mutex_unlock(&scan_lock);
}

int mprof_skipped(uintptr_t pc)
{
    return in_wrapper_ranges(pc) || in_system(pc);
}
