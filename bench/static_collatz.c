/* A small CPU-bound program for the uprobe fallback's cost (bench/README.md,
 * "Static programs"): the total Collatz steps of 1..N (argv[1], default
 * 300000). Built with `cc -static -O2 -g`; measured as
 * `profdev cprof -e ./static_collatz 20000` against the native run. */
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static long steps(long x) {
    long s = 0;
    while (x != 1) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        s++;
    }
    return s;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 300000, t = 0;
    for (long i = 1; i <= n; i++) t += steps(i);
    printf("%ld\n", t);
    return 0;
}
