/* mprof's pools 2 and 3 (see mprof_e2e.rs): mappings and the break. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int anon = MAP_PRIVATE | MAP_ANONYMOUS, rw = PROT_READ | PROT_WRITE;
    char *a = mmap(0, 3 * 4096, rw, anon, -1, 0); /* line 13: 3 pages, unmapped in 2 steps */
    munmap(a + 4096, 4096);
    munmap(a, 3 * 4096);
    char *b = mmap(0, 5000, rw, anon, -1, 0); /* line 16: 2 pages, never unmapped */
    b[0] = 1;
    int fd = open(argc > 1 ? argv[1] : "/proc/self/exe", O_RDONLY);
    char *f = mmap(0, 8192, PROT_READ, MAP_PRIVATE, fd, 0); /* line 19: a file, 2 pages */
    munmap(f, 8192);
    close(fd);
    char *brk0 = sbrk(10000); /* line 22: the break, 10000 bytes */
    sbrk(-4000);
    char *g = mmap(0, 4096, rw, anon, -1, 0); /* line 24: 1 page, moved by mremap */
    g = mremap(g, 4096, 4 * 4096, MREMAP_MAYMOVE); /* line 25: grown to 4 pages */
    munmap(g, 4 * 4096);
    char *big = malloc(1 << 20); /* line 27: malloc's own mmap: pool 1 only */
    memset(big, 1, 1 << 20);
    free(big);
    printf("%p %p\n", (void *)brk0, (void *)b);
    return 0;
}
