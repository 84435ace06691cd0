/* A switch-heavy workload for bench/offcpu_overhead.sh: the main thread
 * computes for about W microseconds, then hands a byte through a pipe to
 * a second thread and waits for it to hand it back, ROUNDS times: two
 * threads block and wake 2 times per round, about 4 context switches.
 *
 * Usage: switchy ROUNDS WORK_ITERATIONS
 * Prints on stderr: elapsed µs of the rounds, and the context switches
 * the process made (getrusage: voluntary + involuntary) in them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int there[2], back[2];
static volatile unsigned long sink;

static void *echo(void *arg)
{
    char c;
    (void)arg;
    while (read(there[0], &c, 1) == 1 && c)
        if (write(back[1], &c, 1) != 1)
            break;
    return 0;
}

static long long now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

static long switches(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_nvcsw + r.ru_nivcsw;
}

__attribute__((noinline)) static void work(long n)
{
    for (long i = 0; i < n; i++)
        sink += i * i;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    long n = argc > 2 ? atol(argv[2]) : 50000;
    pthread_t t;
    char c = 1;
    if (pipe(there) || pipe(back) || pthread_create(&t, 0, echo, 0))
        return 1;
    long s0 = switches();
    long long t0 = now_us();
    for (long r = 0; r < rounds; r++) {
        work(n);
        if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1)
            return 1;
    }
    long long t1 = now_us();
    long s1 = switches();
    c = 0;
    if (write(there[1], &c, 1) != 1)
        return 1;
    pthread_join(t, 0);
    fprintf(stderr, "%lld %ld\n", t1 - t0, s1 - s0);
    return 0;
}
