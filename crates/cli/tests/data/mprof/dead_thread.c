/* mprof_scan.rs's program for glibc's cache of dead threads' stacks: a
 * thread leaks one block of 66,666 bytes whose pointer stays only in its
 * own stack, and ends (joined: glibc keeps its stack for the next
 * thread, stale words included). Then "ready", a wait for "go" on stdin,
 * "done", exit 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 8 KiB of copies of the pointer below the thread's first frames: glibc
 * frees the stack below its last 16 KiB at the thread's end, and the
 * calls of that end reuse only the top of those. */
__attribute__((noinline)) static void deep(void *p)
{
    void *volatile copies[1024];
    for (int i = 0; i < 1024; i++)
        copies[i] = p;
}

static void *body(void *arg)
{
    (void)arg;
    void *p = malloc(66666);
    memset(p, 1, 66666);
    deep(p);
    return 0;
}

/* No stale copy left on main's stack either. */
__attribute__((noinline)) static void scribble(void)
{
    volatile char buf[65536];
    memset((char *)buf, 0x5a, sizeof buf);
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, 0, body, 0) || pthread_join(t, 0))
        return 3;
    scribble();
    printf("ready\n");
    fflush(stdout);
    char go[8];
    if (read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    printf("done\n");
    return 0;
}
