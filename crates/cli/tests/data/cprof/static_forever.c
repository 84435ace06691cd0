/* A static program that runs until it is killed (tests/cprof_static.rs):
 * tick() has run 1001 times when "ready" is printed, and runs on. */
#include <stdio.h>

static volatile unsigned long sink;

__attribute__((noinline)) void tick(unsigned long i) { sink += i; }

int main(void) {
    for (unsigned long i = 0;; i++) {
        tick(i);
        if (i == 1000) {
            puts("ready");
            fflush(stdout);
        }
    }
}
