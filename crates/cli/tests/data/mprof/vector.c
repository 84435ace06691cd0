/* mprof_scan.rs's program for vector registers as roots: a block of
 * 66,666 bytes whose only pointer is in a thread's %xmm5 (as in a memcpy
 * in progress), and a control leak of 44,444 bytes that nothing points
 * to. The pointer reaches the thread masked (pthread keeps the thread's
 * argument: a root) and is unmasked in the register; the thread then says
 * "ready" itself, by a raw write (no library code runs in it after), and
 * spins. main waits for "go", says "done" and exits 0. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MASK 0x5a5a5a5a5a5a5a5aUL

static const char msg[] = "ready\n";

__attribute__((noinline)) static uintptr_t make(size_t n)
{
    char *p = malloc(n);
    memset(p, 1, n);
    return (uintptr_t)p ^ MASK;
}

/* No stale copy of a pointer left on the stack below main's frame. The
 * empty asm that reads the buffer keeps the stores: without it gcc 12 at
 * -O2 drops the memset of a dead local, then the call itself. */
__attribute__((noinline)) static void scribble(void)
{
    char buf[65536];
    memset(buf, 0x5a, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void *holder(void *arg)
{
    uintptr_t hidden = (uintptr_t)arg;
    __asm__ volatile("movq %[h], %%xmm5\n\t"
                     "movq %[m], %%xmm6\n\t"
                     "pxor %%xmm6, %%xmm5\n\t"
                     "pxor %%xmm6, %%xmm6\n\t"
                     "syscall\n"
                     "1:\tpause\n\t"
                     "jmp 1b\n"
                     :
                     : [h] "r"(hidden), [m] "r"(MASK), "a"(1L), "D"(1L), "S"(msg), "d"(6L)
                     : "xmm5", "xmm6", "rcx", "r11", "memory");
    return 0;
}

int main(void)
{
    uintptr_t held = make(66666);
    (void)make(44444);
    /* libc's data may keep a word pointing to the last block malloc
     * returned: one more allocation moves it on. */
    void *volatile moved = malloc(100); /* volatile: not elided with its free */
    free(moved);
    scribble();
    pthread_t t;
    if (pthread_create(&t, 0, holder, (void *)held))
        return 3;
    held = 0;
    char go[8];
    if (read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    printf("done\n");
    fflush(stdout);
    _exit(0);
}
