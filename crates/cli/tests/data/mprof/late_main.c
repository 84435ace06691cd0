/* Waits for "go" on stdin, then dlopens argv[1] and calls its late_alloc
 * (mprof_attach.rs: allocations of a library loaded after the attach). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char go[8];
    printf("ready\n");
    fflush(stdout);
    if (argc < 2 || read(0, go, sizeof go) != 3 || memcmp(go, "go\n", 3))
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    void *(*f)(void) = h ? (void *(*)(void))dlsym(h, "late_alloc") : 0;
    if (!f || !f())
        return 3;
    return 0;
}
