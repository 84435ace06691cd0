/* threads <worker|both> [ms]: "worker": a second thread burns in worker_hot
 * while main waits in pthread_join; "both": main burns in main_hot while the
 * worker burns in worker_hot, each for `ms` of its own CPU time. */
#include "common.h"
#include <pthread.h>
#include <string.h>

WORK_FN(main_hot)
WORK_FN(worker_hot)

static double ms;

static void *worker(void *arg) {
    (void)arg;
    burn_clock(worker_hot, ms, CLOCK_THREAD_CPUTIME_ID);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "worker";
    ms = arg_or(argc, argv, 2, 400);
    size_t n = text_cells();
    unsigned short *buf = calloc(n, sizeof *buf);
    size_t offset = (size_t)__executable_start;
    print_sym("main", (void *)main);
    print_sym("main_hot", (void *)main_hot);
    print_sym("worker_hot", (void *)worker_hot);
    profil(buf, n * 2, offset, 0xFFFF);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    if (strcmp(mode, "both") == 0)
        burn_clock(main_hot, ms, CLOCK_THREAD_CPUTIME_ID);
    pthread_join(t, 0);
    profil(NULL, 0, 0, 0);
    dump("main", buf, n * 2, offset, 0xFFFF);
    return 0;
}
