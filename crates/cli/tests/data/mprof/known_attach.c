/* known.c's allocations, after "go" on stdin (mprof_attach.rs attaches first);
 * "ready" when waiting; with an argument, "done" after, then a line awaited. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *blocks[1000];
static pthread_barrier_t both;

static void *thread_body(void *arg)
{
    void **b = arg;
    for (int i = 0; i < 256; i++)
        b[i] = malloc(4096); /* line 16: 2 threads x 1 MiB in 4 KiB blocks */
    pthread_barrier_wait(&both); /* both MiBs live at once */
    for (int i = 0; i < 256; i++)
        free(b[i]);
    return 0;
}

int main(int argc, char **argv)
{
    char go[8];
    printf("ready\n");
    fflush(stdout);
    if (read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(100); /* line 31: 1000 x 100, 600 freed */
    for (int i = 0; i < 600; i++)
        free(blocks[i]);
    char *big = malloc(65536); /* line 34: 64 KiB never freed */
    memset(big, 1, 65536);
    char *r = malloc(10); /* line 36: 10 bytes, then realloc'd */
    r = realloc(r, 10000); /* line 37: grows to 10000 */
    memset(r, 2, 10000);
    free(r);
    static void *tb[2][256];
    pthread_t t[2];
    pthread_barrier_init(&both, 0, 2);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], 0, thread_body, tb[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], 0);
    if (argc > 1 && argv[1]) {
        printf("done\n");
        fflush(stdout);
        if (read(0, go, sizeof go) <= 0)
            return 2;
    }
    return 0;
}
