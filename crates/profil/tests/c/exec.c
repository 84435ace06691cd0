/* exec <hops> [ms]: profil, burn, then execv itself with hops-1; every new
 * image burns `ms` of CPU before profiling again. The last one prints
 * "survived". A stray SIGPROF kills an image at its default action. */
#include "common.h"
#include <string.h>

WORK_FN(hot)

int main(int argc, char **argv) {
    int hops = argc > 1 ? atoi(argv[1]) : 1;
    double ms = arg_or(argc, argv, 2, 200);
    static unsigned short buf[1 << 16];
    /* The new image runs unprofiled for `ms` of CPU time. */
    burn(hot, ms);
    if (hops == 0) {
        printf("survived\n");
        return 0;
    }
    if (profil(buf, sizeof buf, (size_t)__executable_start, 0xFFFF) != 0) {
        perror("profil");
        return 1;
    }
    burn(hot, ms);
    char next[16], msarg[32];
    snprintf(next, sizeof next, "%d", hops - 1);
    snprintf(msarg, sizeof msarg, "%g", ms);
    execl("/proc/self/exe", argv[0], next, msarg, (char *)0);
    perror("execl");
    return 1;
}
