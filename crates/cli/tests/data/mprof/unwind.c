/* mprof's stacks without frame pointers (built with -O2
 * -fomit-frame-pointer -fno-optimize-sibling-calls): build() and other()
 * call one leaf_alloc(), 4096 and 500 times, 100 bytes each: 409,600 and
 * 50,000 bytes. Argument "libc": sort_a() and sort_b() each sort with
 * qsort, whose comparator allocates (a stack through libc's qsort, built
 * without frame pointers), and dup_a() and dup_b() call strdup. */
#include <stdlib.h>
#include <string.h>

static void *blocks[4096];

__attribute__((noinline)) void leaf_alloc(void **slot)
{
    *slot = malloc(100);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void build(void **b)
{
    for (int i = 0; i < 4096; i++)
        leaf_alloc(&b[i]);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void other(void **b)
{
    for (int i = 0; i < 500; i++)
        leaf_alloc(&b[i]);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void release(void **b, int n)
{
    for (int i = 0; i < n; i++)
        free(b[i]);
}

__attribute__((noinline)) static int cmp_alloc(const void *a, const void *b)
{
    void *p = malloc(24);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int values[64];

__attribute__((noinline)) void sort_a(void)
{
    qsort(values, 64, sizeof values[0], cmp_alloc);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void sort_b(void)
{
    qsort(values, 32, sizeof values[0], cmp_alloc);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void dup_a(void)
{
    blocks[0] = strdup("first string, 31 bytes long...");
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void dup_b(void)
{
    blocks[1] = strdup("second string");
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "libc")) {
        for (int i = 0; i < 64; i++)
            values[i] = (i * 37) % 64;
        sort_a();
        for (int i = 0; i < 64; i++)
            values[i] = (i * 37) % 64;
        sort_b();
        dup_a();
        dup_b();
        free(blocks[0]);
        free(blocks[1]);
        return 0;
    }
    build(blocks);
    release(blocks, 4096);
    other(blocks);
    release(blocks, 500);
    return 0;
}
