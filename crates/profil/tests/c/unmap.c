/* unmap <unmap|readonly>: profil into an mmap'd buffer, burn, make the
 * buffer unwritable (munmap / mprotect PROT_READ), burn, make fresh writable
 * memory appear at the same address, burn, and report whether anything was
 * counted into it (profiling must have turned itself off). */
#define _GNU_SOURCE
#include "common.h"
#include <string.h>
#include <sys/mman.h>

WORK_FN(hot)

static unsigned long total(const unsigned short *b, size_t n) {
    unsigned long t = 0;
    for (size_t i = 0; i < n; i++)
        t += b[i];
    return t;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "unmap";
    double ms = arg_or(argc, argv, 2, 200);
    size_t n = text_cells();
    size_t len = (n * 2 + 4095) & ~(size_t)4095;
    unsigned short *buf = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    profil(buf, n * 2, (size_t)__executable_start, 0xFFFF);
    burn(hot, ms);
    printf("before %lu\n", total(buf, n));
    fflush(stdout);
    if (strcmp(mode, "unmap") == 0) {
        munmap(buf, len);
        burn(hot, ms);
        void *again = mmap(buf, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (again != buf) {
            perror("mmap again");
            return 1;
        }
    } else {
        mprotect(buf, len, PROT_READ);
        unsigned long frozen = total(buf, n);
        burn(hot, ms);
        printf("while_readonly %lu\n", total(buf, n) - frozen);
        mprotect(buf, len, PROT_READ | PROT_WRITE);
        memset(buf, 0, len);
    }
    burn(hot, ms);
    printf("after %lu\n", total(buf, n));
    printf("survived\n");
    return 0;
}
