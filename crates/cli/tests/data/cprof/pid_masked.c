/* A program to attach `profdev cprof -p PID` to (tests/cprof_pid.rs)
 * whose worker thread blocks every signal, SIGTRAP too, as servers'
 * workers do, before any profiler is there. It prints "ready", then for
 * each line "K" on stdin has the worker run work(K) (code it never ran
 * before the first line) and prints "done"; at end of file it prints
 * "n N x X" and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long asked, answered, n;
static unsigned long x;

__attribute__((noinline)) static void work(long k) {
    for (long i = 0; i < k; i++) {
        x = x * 3 + (unsigned long)i; /* WORK */
        n++;
    }
}

static void *worker(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&mu);
    for (;;) {
        while (asked == answered) pthread_cond_wait(&cv, &mu);
        work(asked);
        answered = asked;
        pthread_cond_broadcast(&cv);
    }
    return NULL;
}

int main(void) {
    char line[64];
    pthread_t t;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_create(&t, NULL, worker, NULL);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        pthread_mutex_lock(&mu);
        asked = atol(line);
        answered = 0;
        pthread_cond_broadcast(&cv);
        while (answered != asked) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        printf("done\n");
    }
    printf("n %ld x %lu\n", n, x);
    return 0;
}
