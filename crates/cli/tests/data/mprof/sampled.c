/* mprof --sample-bytes's known pattern (tests/mprof_sample.rs): small()
 * allocates and frees 600,000 blocks of 1,000 bytes, big() 100 blocks of
 * 4 MiB, kept() 200 blocks of 1 MiB that stay live. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void small(void)
{
    for (int i = 0; i < 600000; i++) {
        char *volatile p = malloc(1000);
        p[0] = 1;
        free(p);
    }
}

__attribute__((noinline)) void big(void)
{
    for (int i = 0; i < 100; i++) {
        char *volatile p = malloc(4 << 20);
        p[0] = 1;
        free(p);
    }
}

static void *live[200];

__attribute__((noinline)) void kept(void)
{
    for (int i = 0; i < 200; i++)
        live[i] = malloc(1 << 20);
}

int main(void)
{
    small();
    big();
    kept();
    return live[0] == 0;
}
