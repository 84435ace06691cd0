/* An allocator wrapper (xmalloc, on mprof's list) called by two callers,
 * for mprof_wrapper.rs: built with and without frame pointers and run as
 * a program CMD execs, each caller's bytes must be charged to the
 * caller's line, not to xmalloc's. */
#include <stdlib.h>

__attribute__((noipa)) void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        abort();
    return p;
}

static void *keep[200];

__attribute__((noipa)) void build(void)
{
    for (int i = 0; i < 100; i++)
        keep[i] = xmalloc(4096); /* build's site */
}

__attribute__((noipa)) void other(void)
{
    for (int i = 0; i < 10; i++)
        keep[100 + i] = xmalloc(5000); /* other's site */
}

int main(void)
{
    build();
    other();
    for (int i = 0; i < 110; i++)
        free(keep[i]);
    return 0;
}
