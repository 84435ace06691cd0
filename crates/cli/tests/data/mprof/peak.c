/* mprof_sections' peak: A and B are live at the high-water mark; B is
 * freed and a smaller C allocated after it, so C was never live at the
 * peak. */
#include <stdlib.h>
#include <string.h>

static char *a, *b, *c;

__attribute__((noinline)) char *keep_a(void) { return malloc(100000); } /* line 9 */
__attribute__((noinline)) char *keep_b(void) { return malloc(60000); }  /* line 10 */
__attribute__((noinline)) char *keep_c(void) { return malloc(20000); }  /* line 11 */

int main(void)
{
    a = keep_a();
    b = keep_b();
    memset(b, 1, 60000);
    free(b);
    c = keep_c();
    return (a[0] + c[0]) & 0;
}
