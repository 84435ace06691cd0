/* An allocator wrapper (xmalloc, on mprof's list) called by two callers,
 * for mprof_wrapper.rs: built with and without frame pointers and run as
 * a program CMD execs, each caller's bytes must be charged to the
 * caller's line, not to xmalloc's, the callers taking turns. */
#include <stdlib.h>

__attribute__((noipa)) void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        abort();
    return p;
}

static void *keep[200];

/* One block a call, the two callers taking turns: a site found past the
 * wrapper must be found again at each call (mprof's inline path steps
 * from xmalloc's frame to whichever caller it has). */
__attribute__((noipa)) void build(int i)
{
    keep[i] = xmalloc(4096); /* build's site */
}

__attribute__((noipa)) void other(int i)
{
    keep[100 + i] = xmalloc(5000); /* other's site */
}

int main(void)
{
    for (int i = 0; i < 100; i++) {
        build(i);
        if (i % 10 == 0)
            other(i / 10);
    }
    for (int i = 0; i < 110; i++)
        free(keep[i]);
    return 0;
}
