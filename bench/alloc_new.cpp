/* bench/alloc_new.cpp: C++'s operator new and delete, N pairs (argv[1]),
 * one thread, all at one line: every allocation made through a wrapper
 * (operator new), whose caller mprof must find past it. Prints "elapsed
 * SECONDS" of that work on stderr, as bench/alloc_micro.c does. */
#include <cstdio>
#include <cstdlib>
#include <ctime>

static double now()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    long s = 0;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int *p = new int(static_cast<int>(i));
        __asm__ volatile("" : : "r"(p) : "memory");
        s += *p;
        delete p;
    }
    fprintf(stderr, "elapsed %.3f\n", now() - t0);
    return s == 42;
}
