/* gmon: monstartup over the text, burn in hot() then cold(), _mcleanup()
 * writes gmon.out for gprof. */
#include "common.h"
#include <sys/gmon.h>

WORK_FN(hot)
WORK_FN(cold)

int main(int argc, char **argv) {
    monstartup((unsigned long)__executable_start, (unsigned long)etext);
    burn(hot, arg_or(argc, argv, 1, 500));
    burn(cold, arg_or(argc, argv, 2, 50));
    _mcleanup();
    return 0;
}
