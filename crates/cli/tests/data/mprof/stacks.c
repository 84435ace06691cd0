/* mprof's whole stacks: build() and other() call one leaf_alloc(), 4096
 * and 500 times, 100 bytes each: 409,600 and 50,000 bytes. Argument
 * "keep": other()'s blocks are never freed; "kill": nor are they, and the
 * program ends by SIGKILL; "threads": four threads do it all at once
 * (each frees everything); "threads-kill": four threads at once, each
 * keeping other()'s blocks, then SIGKILL once they are done. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>

#define THREADS 4
static void *blocks[THREADS][4096];
static pthread_barrier_t barrier;
static int keep_other;

__attribute__((noinline)) void leaf_alloc(void **slot)
{
    *slot = malloc(100);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void build(void **b)
{
    for (int i = 0; i < 4096; i++)
        leaf_alloc(&b[i]);
}

__attribute__((noinline)) void other(void **b)
{
    for (int i = 0; i < 500; i++)
        leaf_alloc(&b[i]);
}

__attribute__((noinline)) static void release(void **b, int n)
{
    for (int i = 0; i < n; i++)
        free(b[i]);
}

static void *thread_body(void *arg)
{
    void **b = blocks[(long)arg];
    pthread_barrier_wait(&barrier);
    build(b);
    release(b, 4096);
    other(b);
    if (!keep_other)
        release(b, 500);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "threads") || !strcmp(mode, "threads-kill")) {
        pthread_t t[THREADS];
        keep_other = !strcmp(mode, "threads-kill");
        pthread_barrier_init(&barrier, 0, THREADS);
        for (long i = 0; i < THREADS; i++)
            pthread_create(&t[i], 0, thread_body, (void *)i);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], 0);
        if (keep_other)
            raise(SIGKILL);
        return 0;
    }
    build(blocks[0]);
    release(blocks[0], 4096);
    other(blocks[0]);
    if (!strcmp(mode, "kill"))
        raise(SIGKILL);
    if (strcmp(mode, "keep"))
        release(blocks[0], 500);
    return 0;
}
