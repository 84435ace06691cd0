/* mprof_scan.rs's program: 5 blocks of 77,777 bytes leaked (no pointer to
 * them left anywhere), one of 55,555 held by a global, small blocks held,
 * small blocks freed into the tcache and a fastbin; then "ready" and a
 * wait for "go" on stdin, after which it frees what it holds, prints
 * "done" and exits 0. With the argument "thread", a second thread (its
 * own arena) does the allocating and waits too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *held;
static void *small[16];
static pthread_barrier_t ready;
static int wake[2];

/* The leaks: each pointer dropped at once. */
__attribute__((noinline)) static void leak(void)
{
    for (int i = 0; i < 5; i++) {
        char *volatile p = malloc(77777);
        p[0] = 1;
        p = 0;
    }
}

/* Overwrite the stack below the caller, where leak() and malloc's frames
 * were, so that no stale copy of a leaked pointer stays there. */
__attribute__((noinline)) static void scribble(void)
{
    volatile char buf[65536];
    memset((char *)buf, 0x5a, sizeof buf);
}

__attribute__((noinline)) static void allocate(void)
{
    leak();
    held = malloc(55555);
    memset(held, 7, 55555);
    for (int i = 0; i < 16; i++)
        small[i] = malloc(24 + i);
    void *t[10];
    for (int i = 0; i < 10; i++)
        t[i] = malloc(40); /* freed: 7 into the tcache, 3 into a fastbin */
    for (int i = 0; i < 10; i++)
        free(t[i]);
    memset(t, 0, sizeof t);
}

static void *thread_body(void *arg)
{
    (void)arg;
    allocate();
    scribble();
    pthread_barrier_wait(&ready);
    char c;
    return (void *)(long)read(wake[0], &c, 1);
}

int main(int argc, char **argv)
{
    int threaded = argc > 1 && !strcmp(argv[1], "thread");
    pthread_t t;
    if (threaded) {
        if (pipe(wake))
            return 3;
        pthread_barrier_init(&ready, 0, 2);
        pthread_create(&t, 0, thread_body, 0);
        pthread_barrier_wait(&ready);
    } else {
        allocate();
        scribble();
    }
    printf("ready\n");
    fflush(stdout);
    char go[8];
    if (read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    if (threaded) {
        if (write(wake[1], "x", 1) != 1)
            return 4;
        pthread_join(t, 0);
    }
    for (int i = 0; i < 16; i++)
        free(small[i]);
    free(held);
    printf("done\n");
    return 0;
}
