/* bench/memory_overhead.sh's microbenchmark: T threads (default 2), each
 * N small malloc/free pairs (sizes 16..527 bytes, 8 blocks live at a
 * time), all at the same line; prints "elapsed SECONDS" of that work (from
 * main's start to the threads' end) on stderr. Usage: alloc_micro [N [T]]. */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long n = 2000000;

static void *work(void *arg)
{
    unsigned x = (unsigned)(size_t)arg * 2654435761u + 1;
    void *keep[8] = {0};
    for (long i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        size_t size = 16 + (x >> 16) % 512;
        int k = (x >> 8) & 7;
        free(keep[k]);
        keep[k] = malloc(size);
        ((char *)keep[k])[0] = (char)i;
    }
    for (int k = 0; k < 8; k++)
        free(keep[k]);
    return 0;
}

int main(int argc, char **argv)
{
    double t0 = now();
    int threads = 2;
    if (argc > 1)
        n = atol(argv[1]);
    if (argc > 2)
        threads = atoi(argv[2]);
    if (threads < 1 || threads > 64)
        threads = 2;
    if (threads == 1) { /* no second thread: the process stays single-threaded */
        work(0);
        fprintf(stderr, "elapsed %.3f\n", now() - t0);
        puts("done");
        return 0;
    }
    pthread_t t[64];
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], 0);
    fprintf(stderr, "elapsed %.3f\n", now() - t0);
    puts("done");
    return 0;
}
