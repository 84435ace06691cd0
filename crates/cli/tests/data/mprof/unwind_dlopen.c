/* Loads the shared library argv[1] with dlopen and calls its
 * unwind_main() (tests/data/mprof/unwind.c built with -shared
 * -Dmain=unwind_main): a module profdev does not know before the run. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*m)(int, char **) = (int (*)(int, char **))dlsym(h, "unwind_main");
    if (!m)
        return 1;
    char *args[] = {argv[1], 0};
    return m(1, args);
}
