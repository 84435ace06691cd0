/* Known counts for the uprobe fallback (tests/cprof_static.rs), built
 * with cc -static: called() runs exactly N times (argv[1], default 777),
 * hit() exactly once per i with i % 7 == 3 (111 of 777), never() never;
 * the branch in main's loop is taken or not exactly that often. */
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) int called(int x) { return x * 2; }

__attribute__((noinline)) void hit(int x) { sink += x; }

__attribute__((noinline)) void never(void) { abort(); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 777;
    for (int i = 0; i < n; i++) {
        sink += called(i);
        if (i % 7 == 3)
            hit(i);
    }
    if (argc > 5)
        never();
    printf("sink %ld\n", sink);
    return 0;
}
