/* pg: compiled with -pg, so glibc's startup code runs __monstartup and
 * registers _mcleanup with atexit; linked with this library, whose
 * _mcleanup must hand over to glibc's so that gmon.out is still written. */
#include "common.h"

WORK_FN(hot)

__attribute__((noinline)) static void caller(void) {
    for (int i = 0; i < 10; i++)
        sink += hot(100);
}

int main(int argc, char **argv) {
    caller();
    burn(hot, arg_or(argc, argv, 1, 200));
    return 0;
}
