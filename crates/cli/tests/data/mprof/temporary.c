/* mprof_sections' temporary blocks: a loop that frees each block before
 * its next allocation (all 1000 temporary), and one that keeps its blocks
 * until after another allocation (none temporary). */
#include <stdlib.h>

int main(void)
{
    for (int i = 0; i < 1000; i++) {
        char *p = malloc(64); /* line 9: 1000 blocks, all temporary */
        p[0] = (char)i;
        free(p);
    }
    char *keep[100];
    for (int i = 0; i < 100; i++)
        keep[i] = malloc(32); /* line 15: 100 blocks, none temporary */
    char *last = malloc(16);  /* line 16: kept */
    for (int i = 0; i < 100; i++)
        free(keep[i]);
    return last[0] & 0;
}
