/* monitor [nfunc]: monitor(3C) over the text with a histogram half the text
 * size, burn in hot() then cold(), monitor(0) writes mon.out. */
#include "common.h"
#include "profdev_profil.h"

WORK_FN(hot)
WORK_FN(cold)

int main(int argc, char **argv) {
    size_t nfunc = argc > 1 ? (size_t)atol(argv[1]) : 600;
    size_t text_words = (size_t)(etext - __executable_start + 1) / 2;
    size_t bufsize = 12 + nfunc * 8 + text_words / 2;
    unsigned short *buf = calloc(bufsize, sizeof *buf);
    printf("pid %ld\n", (long)getpid());
    print_sym("main", (void *)main);
    print_sym("hot", (void *)hot);
    print_sym("cold", (void *)cold);
    printf("text %lx %lx\n", (unsigned long)__executable_start, (unsigned long)etext);
    fflush(stdout);
    monitor((int (*)())__executable_start, (int (*)())etext, buf, bufsize, nfunc);
    burn(hot, arg_or(argc, argv, 2, 500));
    burn(cold, arg_or(argc, argv, 3, 50));
    monitor((int (*)())0, 0, 0, 0, 0);
    return 0;
}
