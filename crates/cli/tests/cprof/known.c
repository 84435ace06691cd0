/* cprof's test program: counts known from the code (see cprof_views.rs).
   Build: cc -O0 -g -no-pie -o known known.c; run with no argument. */
static volatile int sink;

int called(int x) /* MARK:called */
{
    return x * 2;
}

void never_called(void)
{
    sink = -1; /* MARK:never */
}

int main(int argc, char **argv)
{
    int n = 10, k = 0, i;
    (void)argv;
    for (i = 0; i < n; i++) { /* MARK:for */
        sink += called(i);
        if (i % 5 == 0) /* MARK:branch */
            k++;
    }
    if (argc > 5) never_called(); /* MARK:partly */
    return k == 2 ? 0 : 1;
}
