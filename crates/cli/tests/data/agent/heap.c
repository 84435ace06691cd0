/* profdev agent --heap: a program driven by one-letter commands on stdin,
 * answering one line each on stdout.
 *   w  which object the malloc its GOT holds lives in (dladdr's file)
 *   g  churn(): 20,000 blocks of 10,000 bytes allocated and freed at one
 *      line (200,000,000 bytes), then 100 blocks of 10,000 bytes kept
 *   q  free what it kept and exit 0
 * It starts by printing "ready PID".
 * Built with -O0 -fno-omit-frame-pointer: churn's frame stays on the
 * stack mprof walks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *kept[100];
/* Through the GOT: the address malloc resolves to for this program. */
static void *(*volatile got_malloc)(size_t);

static void churn(void)
{
    for (int i = 0; i < 20000; i++) {
        char *p = malloc(10000); /* the churning line */
        p[0] = 1;
        free(p);
    }
    for (int i = 0; i < 100; i++)
        kept[i] = malloc(10000); /* the kept line */
}

int main(void)
{
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    int c;
    while ((c = getchar()) != EOF) {
        if (c == 'w') {
            got_malloc = malloc;
            Dl_info di;
            const char *f = dladdr((void *)got_malloc, &di) && di.dli_fname ? di.dli_fname : "?";
            const char *base = strrchr(f, '/');
            printf("malloc in %s\n", base ? base + 1 : f);
        } else if (c == 'g') {
            churn();
            printf("done\n");
        } else if (c == 'q') {
            for (int i = 0; i < 100; i++)
                free(kept[i]);
            return 0;
        }
    }
    return 1;
}
