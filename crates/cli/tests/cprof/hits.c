#include <stdio.h>
#include <stdlib.h>
static int sink;
__attribute__((noinline)) static int pick(int x) {
    int r = 0;
    if (x > 1000)          /* one arm never runs */
        r = -1;
    else
        r = x * 2;
    if (x & 1)
        goto shared;       /* a branch into a block with two ways in */
    r += 3;
shared:
    r += 1;
    if (x % 3 == 0)        /* its skip lands on a block with two ways in */
        r += 7;
    return r;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (int i = 0; i < n; i++)
        sink += pick(i);
    if (argc > 5)
        puts("never");
    printf("%d\n", sink);
    return 0;
}
