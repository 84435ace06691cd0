/* mprof's test program: known sizes at known lines (see mprof_e2e.rs). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *blocks[1000];
static pthread_barrier_t both;

static void *thread_body(void *arg)
{
    void **b = arg;
    for (int i = 0; i < 256; i++)
        b[i] = malloc(4096); /* line 13: 2 threads x 1 MiB in 4 KiB blocks */
    pthread_barrier_wait(&both); /* both MiBs live at once */
    for (int i = 0; i < 256; i++)
        free(b[i]);
    return 0;
}

int main(void)
{
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(100); /* line 23: 1000 x 100, 600 freed */
    for (int i = 0; i < 600; i++)
        free(blocks[i]);
    char *big = malloc(65536); /* line 26: 64 KiB never freed */
    memset(big, 1, 65536);
    char *r = malloc(10); /* line 28: 10 bytes, then realloc'd */
    r = realloc(r, 10000); /* line 29: grows to 10000 */
    memset(r, 2, 10000);
    free(r);
    static void *tb[2][256];
    pthread_t t[2];
    pthread_barrier_init(&both, 0, 2);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], 0, thread_body, tb[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], 0);
    return 0;
}
