/* A small CPU-bound program: Collatz steps of 1..N. */
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
