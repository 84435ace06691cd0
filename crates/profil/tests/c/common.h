/* Shared helpers of the profil test programs (see ../c_programs.rs).
 *
 * Every program prints, on stdout, lines the Rust harness parses:
 *   sym <name> <runtime address in hex>     functions of interest (PIE bias)
 *   profil <tag> <offset hex> <bufsiz> <scale>
 *   cell <tag> <index> <count>              nonzero cells only
 *   <anything else>                         free text (e.g. "survived")
 */
#ifndef PROFIL_TEST_COMMON_H
#define PROFIL_TEST_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

extern char __executable_start[];
extern char etext[];

static volatile unsigned long sink;

/* The work: an xorshift loop without calls, so its ticks stay inside it. */
#define WORK_FN(name)                                                   \
    __attribute__((noinline)) unsigned long name(unsigned long n) {     \
        unsigned long x = n | 1;                                        \
        for (unsigned long i = 0; i < n; i++) {                         \
            x ^= x << 13;                                               \
            x ^= x >> 7;                                                \
            x ^= x << 17;                                               \
        }                                                               \
        return x;                                                       \
    }

static double cpu_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Run fn until `ms` more milliseconds of `clock` CPU time were consumed. */
static void burn_clock(unsigned long (*fn)(unsigned long), double ms, clockid_t clock) {
    double end = cpu_ms(clock) + ms;
    while (cpu_ms(clock) < end)
        sink += fn(200000);
}

static void burn(unsigned long (*fn)(unsigned long), double ms) {
    burn_clock(fn, ms, CLOCK_PROCESS_CPUTIME_ID);
}

static void print_sym(const char *name, const void *addr) {
    printf("sym %s %lx\n", name, (unsigned long)addr);
}

/* Cells covering the whole executable text with ~2 bytes per cell (scale 0xFFFF). */
static size_t text_cells(void) {
    return (size_t)(etext - __executable_start) / 2 + 64;
}

static void dump(const char *tag, const unsigned short *buf, size_t bufsiz, size_t offset,
                 unsigned scale) {
    printf("profil %s %lx %zu %u\n", tag, (unsigned long)offset, bufsiz, scale);
    for (size_t i = 0; i < bufsiz / 2; i++)
        if (buf[i])
            printf("cell %s %zu %u\n", tag, i, buf[i]);
    fflush(stdout);
}

static double arg_or(int argc, char **argv, int i, double dflt) {
    return argc > i ? atof(argv[i]) : dflt;
}

#endif
