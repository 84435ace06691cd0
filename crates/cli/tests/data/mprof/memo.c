/* mprof's memo of stacks (issue 29): one allocating line reached by two
 * stacks that differ only two frames above it. leaf() allocates, mid()
 * calls leaf(), outer_a() and outer_b() (the same code, so the same frame
 * sizes) call mid(), alternately from one loop: each allocation has the
 * same site, the same stack pointer and the same frame pointer, and only
 * mid()'s return address (into outer_a or outer_b) tells them apart.
 * outer_a: 3000 blocks of 100 bytes (300,000); outer_b: 1000 of 10
 * (10,000). */
#include <stdlib.h>

static void *blocks[4000];

__attribute__((noinline)) void leaf(void **slot, size_t n)
{
    *slot = malloc(n);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void mid(void **slot, size_t n)
{
    leaf(slot, n);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void outer_a(void **slot, size_t n)
{
    mid(slot, n);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void outer_b(void **slot, size_t n)
{
    mid(slot, n);
    __asm__ volatile("" ::: "memory");
}

int main(void)
{
    for (int i = 0; i < 4000; i++) {
        if (i % 4 == 3)
            outer_b(&blocks[i], 10);
        else
            outer_a(&blocks[i], 100);
    }
    for (int i = 0; i < 4000; i++)
        free(blocks[i]);
    return 0;
}
