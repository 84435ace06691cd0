/* A library late_main.c loads after the attach (mprof_attach.rs). */
#include <stdlib.h>

void *late_alloc(void)
{
    return malloc(12345); /* line 6: never freed */
}
