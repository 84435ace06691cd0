/* replace: profil into a, burn, profil into b (replacing), burn; a must not
 * change after the replacement, b must count. */
#include "common.h"

WORK_FN(hot)

static unsigned long total(const unsigned short *b, size_t n) {
    unsigned long t = 0;
    for (size_t i = 0; i < n; i++)
        t += b[i];
    return t;
}

int main(int argc, char **argv) {
    double ms = arg_or(argc, argv, 1, 200);
    size_t n = text_cells();
    unsigned short *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    size_t offset = (size_t)__executable_start;
    profil(a, n * 2, offset, 0xFFFF);
    burn(hot, ms);
    profil(b, n * 2, offset, 0xFFFF);
    unsigned long a_at_switch = total(a, n);
    burn(hot, ms);
    profil(NULL, 0, 0, 0);
    printf("a_at_switch %lu\na_final %lu\nb_final %lu\n", a_at_switch, total(a, n), total(b, n));
    return 0;
}
