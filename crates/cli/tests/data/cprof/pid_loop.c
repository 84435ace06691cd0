/* A program to attach `profdev cprof -p PID` to while it runs
 * (tests/cprof_pid.rs).
 *
 * It prints "ready", then reads lines on stdin until end of file (its
 * stop): for each line "K" it runs the outer loop K times, each outer
 * iteration running the inner loop exactly 10 times, and prints "done".
 * At end of file it prints "n N x X" (outer iterations in all, the value
 * computed) and exits 0. Between lines it waits in read(2), outside the
 * loops, so an attach made while it waits starts at a whole outer
 * iteration: from the attach on, the INNER line runs exactly 10 times for
 * each run of the OUTER line, whenever the attach comes. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long n;
static unsigned long x;

__attribute__((noinline)) static void loops(long k) {
    for (long i = 0; i < k; i++) {
        n++; /* OUTER */
        for (int j = 0; j < 10; j++) {
            x = x * 3 + (unsigned long)j; /* INNER */
        }
    }
}

__attribute__((noinline)) static void never(void) {
    abort(); /* NEVER */
}

int main(int argc, char **argv) {
    char line[64];
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 5) never();
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        loops(atol(line));
        printf("done\n");
    }
    printf("n %lu x %lu\n", n, x);
    return 0;
}
