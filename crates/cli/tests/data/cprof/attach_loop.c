/* A program to attach coverage to while it runs (tests/cprof_attach.rs).
 *
 * attach_loop NTHREADS (1 or 2): before_only() runs, NTHREADS workers
 * start, "ready" is printed. Then, per line on stdin:
 *   go K   each worker runs outer_X() 1000*K times (worker 0 outer_a,
 *          worker 1 outer_b), all at once; "done" is printed when all
 *          have finished
 *   gs     "gs M W0 [W1]": the GS base of the main thread and of each
 *          worker, in hex (where coverage keeps each thread's counters)
 *   new K  a new thread runs outer_b() 1000*K times from 0, and ends;
 *          "new X" (its final value) is printed once it is joined
 *   quit   the workers end; "sum X0 [X1]" (their final values) is printed
 *          and the program exits 0.
 * outer_X() calls inner() exactly 10 times; inner() is straight-line, so
 * each of its instructions runs 10 times per outer_X() call. Between
 * commands every thread waits in read(2), outside the counted code. */
#include <asm/prctl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((noinline)) uint64_t inner(uint64_t x) { return x * 3 + 1; }

__attribute__((noinline)) uint64_t outer_a(uint64_t x) {
    for (int j = 0; j < 10; j++) x = inner(x) ^ (uint64_t)j;
    return x;
}

__attribute__((noinline)) uint64_t outer_b(uint64_t x) {
    for (int j = 0; j < 10; j++) x = inner(x) ^ (uint64_t)j;
    return x;
}

__attribute__((noinline)) void before_only(void) { write(1, "", 0); }

__attribute__((noinline)) void never(void) { abort(); }

struct worker {
    int cmd[2];
    uint64_t x;
    unsigned long gs;
    uint64_t (*outer)(uint64_t);
    pthread_t t;
};

/* outer_X() calls per command byte: long enough for two workers to run
 * the counted code at the same time. */
#define REPS 1000

static int ack[2];

static void *work(void *p) {
    struct worker *w = p;
    char c;
    while (read(w->cmd[0], &c, 1) == 1 && c != 'q') {
        if (c == 's')
            syscall(SYS_arch_prctl, ARCH_GET_GS, &w->gs);
        else
            for (int r = 0; r < REPS; r++) w->x = w->outer(w->x);
        if (write(ack[1], "a", 1) != 1) abort();
    }
    return NULL;
}

struct fresh {
    uint64_t x;
    long k;
};

static void *fresh(void *p) {
    struct fresh *f = p;
    for (long r = 0; r < f->k * REPS; r++) f->x = outer_b(f->x);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > 2) return 2;
    if (argc > 5) never();
    before_only();
    struct worker w[2];
    memset(w, 0, sizeof w);
    if (pipe(ack)) return 2;
    for (int i = 0; i < n; i++) {
        w[i].outer = i ? outer_b : outer_a;
        if (pipe(w[i].cmd) || pthread_create(&w[i].t, NULL, work, &w[i])) return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    char line[64];
    static char buf[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        long k;
        if (sscanf(line, "go %ld", &k) == 1 && k > 0 && k <= (long)sizeof buf) {
            memset(buf, 'g', k);
            for (int i = 0; i < n; i++)
                if (write(w[i].cmd[1], buf, k) != k) return 2;
            for (long got = 0; got < k * n;) {
                long want = k * n - got;
                ssize_t r = read(ack[0], buf, want < (long)sizeof buf ? want : (long)sizeof buf);
                if (r <= 0) return 2;
                got += r;
            }
            printf("done\n");
        } else if (!strcmp(line, "gs\n")) {
            unsigned long mine = 0;
            syscall(SYS_arch_prctl, ARCH_GET_GS, &mine);
            for (int i = 0; i < n; i++)
                if (write(w[i].cmd[1], "s", 1) != 1) return 2;
            for (long got = 0; got < n;) {
                ssize_t r = read(ack[0], buf, n - got);
                if (r <= 0) return 2;
                got += r;
            }
            printf("gs %lx", mine);
            for (int i = 0; i < n; i++) printf(" %lx", w[i].gs);
            printf("\n");
        } else if (sscanf(line, "new %ld", &k) == 1 && k > 0) {
            struct fresh f = {0, k};
            pthread_t t;
            if (pthread_create(&t, NULL, fresh, &f) || pthread_join(t, NULL)) return 2;
            printf("new %llu\n", (unsigned long long)f.x);
        } else if (!strcmp(line, "quit\n")) {
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        if (write(w[i].cmd[1], "q", 1) != 1) return 2;
        pthread_join(w[i].t, NULL);
    }
    printf("sum");
    for (int i = 0; i < n; i++) printf(" %llu", (unsigned long long)w[i].x);
    printf("\n");
    return 0;
}
