/* mprof_scan.rs's program for the roots a program maps itself and for
 * leaks grouped by stack: 8 blocks of 3,333 bytes whose only pointers lie
 * in an anonymous mapping the program made itself (as Python's object
 * arenas), and leaks through one leaf_alloc() from two call paths:
 * build() 3 x 4,000 bytes, other() 2 x 5,000. Then "ready", a wait for
 * "go" on stdin, the held blocks freed, "done", exit 0. With "late",
 * build() waits for "l" after "ready" (for mprof -p to attach first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HELD 8

static void **pool;

__attribute__((noinline)) static void *leaf_alloc(size_t n)
{
    char *p = malloc(n); /* the leaks' site */
    p[0] = 1;
    return p;
}

__attribute__((noinline)) static void build(void)
{
    for (int i = 0; i < 3; i++) {
        void *volatile p = leaf_alloc(4000);
        p = 0;
    }
}

__attribute__((noinline)) static void other(void)
{
    for (int i = 0; i < 2; i++) {
        void *volatile p = leaf_alloc(5000);
        p = 0;
    }
}

/* The held blocks: their pointers only in the mapping. */
__attribute__((noinline)) static void hold(void)
{
    pool = mmap(0, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pool == MAP_FAILED)
        exit(3);
    for (int i = 0; i < HELD; i++) {
        pool[64 * i + 1] = malloc(3333);
        memset(pool[64 * i + 1], 7, 3333);
    }
}

/* No stale copy of a pointer left on the stack below main's frame. */
__attribute__((noinline)) static void scribble(void)
{
    volatile char buf[65536];
    memset((char *)buf, 0x5a, sizeof buf);
}

int main(int argc, char **argv)
{
    /* "late": build()'s leaks wait for "l" on stdin (and say "leaked"). */
    int late = argc > 1 && !strcmp(argv[1], "late");
    hold();
    other();
    if (!late)
        build();
    scribble();
    printf("ready\n");
    fflush(stdout);
    char go[8];
    if (late) {
        if (read(0, go, sizeof go) != 2 || memcmp(go, "l\n", 2))
            return 2;
        build();
        /* Attached, libc's data was seen keeping a word that points to the
         * last block malloc returned: one more allocation moves it on. */
        free(malloc(100));
        scribble();
        printf("leaked\n");
        fflush(stdout);
    }
    if (read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    for (int i = 0; i < HELD; i++)
        free(pool[64 * i + 1]);
    printf("done\n");
    return 0;
}
