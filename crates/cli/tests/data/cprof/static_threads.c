/* Two threads of a static program (tests/cprof_static.rs) run the same
 * loop, twice (the second two take the arrays the first two left): step()
 * runs exactly 4 * N times (N = argv[1], default 2000000), which counts
 * kept in one shared array would lose (a count is a plain `incq`, not
 * atomic). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;
static unsigned long n = 2000000;

__attribute__((noinline)) void step(unsigned long i) { sink += i; }

static void *run(void *arg) {
    for (unsigned long i = 0; i < n; i++)
        step(i);
    return arg;
}

int main(int argc, char **argv) {
    if (argc > 1)
        n = strtoul(argv[1], NULL, 10);
    for (int round = 0; round < 2; round++) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, run, NULL);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
    }
    printf("done\n");
    return 0;
}
