/* A malloc of its own (mprof_scan.rs preloads it): a bump allocator in a
 * static arena; free does nothing. The scan must refuse the process. */
#include <stddef.h>
#include <string.h>

static char arena[64 << 20];
static size_t used;

void *malloc(size_t n)
{
    size_t at = (used + 15) & ~(size_t)15;
    if (at + n + 16 > sizeof arena)
        return 0;
    used = at + n + 16;
    memcpy(arena + at, &n, sizeof n);
    return arena + at + 16;
}

void free(void *p) { (void)p; }

void *calloc(size_t k, size_t n)
{
    void *p = malloc(k * n);
    if (p)
        memset(p, 0, k * n);
    return p;
}

void *realloc(void *p, size_t n)
{
    void *q = malloc(n);
    if (q && p) {
        size_t old;
        memcpy(&old, (char *)p - 16, sizeof old);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}
