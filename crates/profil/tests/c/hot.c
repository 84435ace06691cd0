/* hot [hot_ms [cold_ms [scale [bufsiz]]]]: profil over the whole text, burn
 * CPU in hot() then cold(), dump the cells. Built against glibc or ours. */
#include "common.h"

WORK_FN(hot)
WORK_FN(cold)

int main(int argc, char **argv) {
    double hot_ms = arg_or(argc, argv, 1, 600), cold_ms = arg_or(argc, argv, 2, 60);
    unsigned scale = argc > 3 ? (unsigned)strtoul(argv[3], 0, 0) : 0xFFFF;
    size_t n = text_cells();
    size_t bufsiz = argc > 4 ? (size_t)strtoul(argv[4], 0, 0) : n * 2;
    unsigned short *buf = calloc(n, sizeof *buf);
    size_t offset = (size_t)__executable_start;
    print_sym("main", (void *)main);
    print_sym("hot", (void *)hot);
    print_sym("cold", (void *)cold);
    if (profil(buf, bufsiz, offset, scale) != 0) {
        perror("profil");
        return 1;
    }
    burn(hot, hot_ms);
    burn(cold, cold_ms);
    profil(NULL, 0, 0, 0);
    dump("main", buf, n * 2, offset, scale);
    return 0;
}
