/* mprof -p's outputs (tests/mprof_attach_outputs.rs): stacks.c's,
 * sampled.c's and temporary.c's allocations, made after "go" on stdin so
 * that mprof attaches first; "ready" when waiting. Argument "stacks":
 * build() and other() call leaf_alloc() (409,600 and 50,000 bytes);
 * "sample": small(), 600,000 blocks of 1,000 bytes; "temporary":
 * temporary.c's loops (line 9's 1000 blocks all temporary); "dlopen
 * LIB": LIB loaded with dlopen after the attach, and its unwind_main()
 * called (unwind.c built -shared -Dmain=unwind_main, without frame
 * pointers: a module the attach did not see). */
#define main stacks_main
#include "stacks.c"
#undef main
#define main temporary_main
#include "temporary.c"
#undef main
#define main sampled_main
#include "sampled.c"
#undef main
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char go[8];
    /* stdio's buffers before the attach: nothing after it but the work. */
    printf("ready\n");
    fflush(stdout);
    if (argc < 2 || read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    if (!strcmp(argv[1], "stacks"))
        return stacks_main(1, argv);
    if (!strcmp(argv[1], "temporary"))
        return temporary_main();
    if (!strcmp(argv[1], "dlopen") && argc > 2) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        int (*m)(int, char **) = (int (*)(int, char **))dlsym(h, "unwind_main");
        char *args[] = {argv[2], 0};
        return m ? m(1, args) : 1;
    }
    if (!strcmp(argv[1], "sample")) {
        small();
        return 0;
    }
    return 2;
}
